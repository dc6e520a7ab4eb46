package events

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func recv(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e := <-s.C:
		return e
	case <-time.After(2 * time.Second):
		t.Fatal("no event")
		return Event{}
	}
}

func empty(t *testing.T, s *Subscription) {
	t.Helper()
	select {
	case e := <-s.C:
		t.Fatalf("unexpected event %+v", e)
	default:
	}
}

// TestStuckSubscriberNeverBlocks: a subscriber that never reads does not
// slow a publisher down; what it could not take is counted.
func TestStuckSubscriberNeverBlocks(t *testing.T) {
	b := New(0)
	stuck := b.Subscribe(16, nil)
	defer stuck.Close()
	const n = 1_000_000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			b.Publish(Event{Type: Counters, Data: i})
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the publisher is blocked by a subscriber that does not read")
	}
	if got := stuck.Dropped(); got != n-16 {
		t.Errorf("dropped %d, want %d", got, n-16)
	}
	if b.Published() != n || b.Last() != n {
		t.Errorf("published %d last %d", b.Published(), b.Last())
	}
}

// TestResyncAfterDrops: after drops the subscriber's next event is a resync
// carrying the count, then live events again, in order.
func TestResyncAfterDrops(t *testing.T) {
	b := New(0)
	s := b.Subscribe(2, nil)
	defer s.Close()
	for i := 1; i <= 5; i++ {
		b.Publish(Event{Type: CallCreated, Data: i})
	}
	if e := recv(t, s); e.ID != 1 || e.Type != CallCreated {
		t.Fatalf("first %+v", e)
	}
	if e := recv(t, s); e.ID != 2 {
		t.Fatalf("second %+v", e)
	}
	empty(t, s)
	b.Publish(Event{Type: CallEnded})
	e := recv(t, s)
	if e.Type != Resync || e.ID != 0 {
		t.Fatalf("after drops: %+v, want a resync", e)
	}
	if d := e.Data.(map[string]uint64)["dropped"]; d != 3 {
		t.Errorf("resync says %d dropped, want 3", d)
	}
	if e := recv(t, s); e.ID != 6 || e.Type != CallEnded {
		t.Fatalf("after resync %+v", e)
	}
	// Caught up: no further resync.
	b.Publish(Event{Type: CallEnded})
	if e := recv(t, s); e.ID != 7 {
		t.Fatalf("live again %+v", e)
	}
	empty(t, s)
}

// TestFilterAndTenants: a subscriber sees only what its filter takes, so a
// tenant's stream never sees another tenant's or the guard's events.
func TestFilterAndTenants(t *testing.T) {
	b := New(0)
	acme := b.Subscribe(0, func(e Event) bool { return e.Tenant == "acme" && !e.Type.Security() })
	all := b.Subscribe(0, nil)
	defer acme.Close()
	defer all.Close()
	b.Publish(Event{Type: CallCreated, Tenant: "acme"})
	b.Publish(Event{Type: CallCreated, Tenant: "globex"})
	b.Publish(Event{Type: BanAdded})
	b.Publish(Event{Type: RegistrationAdded, Tenant: "acme"})
	if e := recv(t, acme); e.ID != 1 {
		t.Fatalf("acme got %+v", e)
	}
	if e := recv(t, acme); e.ID != 4 {
		t.Fatalf("acme got %+v", e)
	}
	empty(t, acme)
	for want := uint64(1); want <= 4; want++ {
		if e := recv(t, all); e.ID != want {
			t.Fatalf("all got %+v, want id %d", e, want)
		}
	}
	if acme.Dropped() != 0 {
		t.Errorf("filtered events counted as dropped: %d", acme.Dropped())
	}
}

// TestSince: a reconnecting reader resumes after the last event it saw
// while that is still in the ring, else it must start from a snapshot.
func TestSince(t *testing.T) {
	b := New(4)
	if evs, ok := b.Since(0); !ok || len(evs) != 0 {
		t.Fatalf("empty bus: %v %v", evs, ok)
	}
	for range 6 {
		b.Publish(Event{Type: Counters})
	}
	ids := func(evs []Event) string {
		s := ""
		for _, e := range evs {
			s += fmt.Sprint(e.ID, " ")
		}
		return s
	}
	tests := []struct {
		after uint64
		want  string
		ok    bool
	}{
		{2, "3 4 5 6 ", true},
		{4, "5 6 ", true},
		{5, "6 ", true},
		{6, "", true},
		{1, "", false}, // 2 has left the ring
		{0, "", false},
		{9, "", false}, // from another process's sequence
	}
	for _, tt := range tests {
		evs, ok := b.Since(tt.after)
		if ok != tt.ok || ids(evs) != tt.want {
			t.Errorf("Since(%d) = %q %v, want %q %v", tt.after, ids(evs), ok, tt.want, tt.ok)
		}
	}
}

// TestCloseStopsDelivery: a closed subscription gets nothing more and is
// forgotten by the bus, while publishers keep going.
func TestCloseStopsDelivery(t *testing.T) {
	b := New(0)
	s := b.Subscribe(8, nil)
	b.Publish(Event{Type: Counters})
	s.Close()
	s.Close() // twice is fine
	b.Publish(Event{Type: Counters})
	if e := recv(t, s); e.ID != 1 {
		t.Fatalf("queued event lost: %+v", e)
	}
	empty(t, s)
	if b.Subscribers() != 0 {
		t.Errorf("%d subscribers after close", b.Subscribers())
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed")
	}
}

// TestConcurrentPublishSubscribe runs publishers against subscribers that
// come and go (for the race detector), and checks each subscriber sees
// increasing ids.
func TestConcurrentPublishSubscribe(t *testing.T) {
	b := New(64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20000 {
				b.Publish(Event{Type: Counters})
			}
		}()
	}
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := b.Subscribe(32, nil)
			defer s.Close()
			var last uint64
			for range 2000 {
				select {
				case e := <-s.C:
					if e.Type == Resync {
						continue
					}
					if e.ID <= last {
						errs <- fmt.Errorf("id %d after %d", e.ID, last)
						return
					}
					last = e.ID
				case <-time.After(time.Second):
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkPublish is the cost of one event with 0, 1 and 10 subscribers
// that keep up.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			bus := New(0)
			var wg sync.WaitGroup
			for range n {
				s := bus.Subscribe(4096, nil)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-s.C:
						case <-s.Done():
							return
						}
					}
				}()
				defer s.Close()
			}
			e := Event{Type: CallAnswered, Tenant: "acme"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bus.Publish(e)
			}
		})
	}
}
