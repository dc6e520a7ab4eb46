package events

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Type names an event; on the event stream it is the SSE event name.
type Type string

// Event types (DESIGN.md 5.8).
const (
	Snapshot Type = "snapshot" // the state, first on a stream and after a resync
	Resync   Type = "resync"   // events were dropped: re-read the state

	CallCreated  Type = "call.created"
	CallRinging  Type = "call.ringing"
	CallAnswered Type = "call.answered"
	CallHeld     Type = "call.held"
	CallEnded    Type = "call.ended"

	RegistrationAdded     Type = "registration.added"
	RegistrationRefreshed Type = "registration.refreshed"
	RegistrationRemoved   Type = "registration.removed"
	RegistrationExpired   Type = "registration.expired"

	TrunkState Type = "trunk.state"

	BanAdded  Type = "ban.added"
	BanLifted Type = "ban.lifted"

	Counters Type = "counters"

	// VoicemailChanged: a mailbox's messages changed (a deposit, a
	// deletion, a message heard or saved); data {extension, new, saved}.
	VoicemailChanged Type = "voicemail.changed"
	// RecordingFinished: a call's recording is whole on disk; data is its
	// sidecar.
	RecordingFinished Type = "recording.finished"
)

// Security reports whether events of type t concern the security guard,
// which tenant-scoped readers never see.
func (t Type) Security() bool { return t == BanAdded || t == BanLifted }

// Event is one state change.
type Event struct {
	ID     uint64    `json:"id"` // process-wide sequence, set by Publish
	Type   Type      `json:"type"`
	At     time.Time `json:"at"`               // set by Publish when zero
	Tenant string    `json:"tenant,omitempty"` // empty: the whole system
	Data   any       `json:"data,omitempty"`   // JSON-encodable
}

// Defaults.
const (
	// DefaultQueue is a subscriber's queue length when Subscribe gets 0.
	DefaultQueue = 256
	// DefaultRing is how many recent events Since can replay.
	DefaultRing = 1024
)

// Bus fans events out to subscribers without ever blocking a publisher.
// The zero value is not usable; call New.
type Bus struct {
	seq       atomic.Uint64
	published atomic.Uint64
	subs      atomic.Pointer[[]*Subscription] // copy on write
	subMu     sync.Mutex                      // serialises writers of subs

	ringMu sync.Mutex
	ring   []Event
	next   int // where the next event goes in ring
	full   bool
}

// New returns a bus that remembers the ring most recent events (0:
// DefaultRing).
func New(ring int) *Bus {
	if ring <= 0 {
		ring = DefaultRing
	}
	b := &Bus{ring: make([]Event, ring)}
	b.subs.Store(&[]*Subscription{})
	return b
}

// Publish stamps e with the next sequence number (and the time, when zero)
// and offers it to every subscriber whose filter takes it. It never waits
// for a subscriber; concurrent publishers take turns (each offer is a
// non-blocking channel send), so every subscriber sees increasing ids.
func (b *Bus) Publish(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	b.ringMu.Lock()
	defer b.ringMu.Unlock()
	e.ID = b.seq.Add(1)
	b.ring[b.next] = e
	b.next++
	if b.next == len(b.ring) {
		b.next, b.full = 0, true
	}
	b.published.Add(1)
	for _, s := range *b.subs.Load() {
		s.offer(e)
	}
}

// Last is the sequence number of the newest event (0: none yet).
func (b *Bus) Last() uint64 { return b.seq.Load() }

// Published is how many events were published.
func (b *Bus) Published() uint64 { return b.published.Load() }

// Since returns the events after id that are still in the ring, oldest
// first; ok is false when some of them have already left it (the reader
// must start from a snapshot).
func (b *Bus) Since(id uint64) (evs []Event, ok bool) {
	b.ringMu.Lock()
	defer b.ringMu.Unlock()
	last := b.seq.Load()
	if id >= last {
		return nil, id == last
	}
	n := b.next
	if b.full {
		n = len(b.ring)
	}
	if last-id > uint64(n) {
		return nil, false
	}
	want := int(last - id)
	for i := want; i > 0; i-- {
		idx := (b.next - i + len(b.ring)) % len(b.ring)
		evs = append(evs, b.ring[idx])
	}
	return evs, true
}

// Subscribe returns a subscription receiving the events filter accepts (nil:
// all) on a queue of size events (0: DefaultQueue). Close it when done.
func (b *Bus) Subscribe(size int, filter func(Event) bool) *Subscription {
	if size <= 0 {
		size = DefaultQueue
	}
	ch := make(chan Event, size)
	s := &Subscription{C: ch, ch: ch, bus: b, filter: filter, done: make(chan struct{})}
	b.subMu.Lock()
	subs := append(slices.Clone(*b.subs.Load()), s)
	b.subs.Store(&subs)
	b.subMu.Unlock()
	return s
}

// Subscribers is how many subscriptions are open.
func (b *Bus) Subscribers() int { return len(*b.subs.Load()) }

func (b *Bus) remove(s *Subscription) {
	b.subMu.Lock()
	subs := slices.DeleteFunc(slices.Clone(*b.subs.Load()), func(x *Subscription) bool { return x == s })
	b.subs.Store(&subs)
	b.subMu.Unlock()
}

// Subscription is one subscriber's queue.
type Subscription struct {
	// C delivers the events. A Resync event on it means events were dropped
	// since the previous one delivered.
	C <-chan Event

	ch      chan Event
	bus     *Bus
	filter  func(Event) bool
	mu      sync.Mutex // serialises offers, so a resync precedes what follows it
	lagging bool
	dropped atomic.Uint64
	once    sync.Once
	done    chan struct{}
}

func (s *Subscription) offer(e Event) {
	if s.filter != nil && !s.filter(e) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return
	default:
	}
	if s.lagging {
		select {
		// A resync has no sequence number of its own (ID 0): it stands for
		// the events that were dropped.
		case s.ch <- Event{Type: Resync, At: e.At, Data: map[string]uint64{"dropped": s.dropped.Load()}}:
			s.lagging = false
		default:
			s.dropped.Add(1)
			return
		}
	}
	select {
	case s.ch <- e:
	default:
		s.dropped.Add(1)
		s.lagging = true
	}
}

// Dropped is how many events this subscriber lost to a full queue.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Done is closed when the subscription is closed.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Close stops deliveries. Events already queued stay readable on C.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.bus.remove(s)
		s.mu.Lock()
		close(s.done)
		s.mu.Unlock()
	})
}
