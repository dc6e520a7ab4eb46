package web

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/events"
	"pbx/web/api"
)

// sse is one Server-Sent Event as a client parses it.
type sse struct {
	id, event string
	data      map[string]any
	comment   bool
}

// stream is an open GET /v1/events.
type stream struct {
	t      *testing.T
	cancel context.CancelFunc
	resp   *http.Response
	events chan sse
}

func (e *env) stream(t *testing.T, token string, hdr ...string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stream{t: t, cancel: cancel, resp: resp, events: make(chan sse, 1024)}
	t.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" || cur.comment {
					s.events <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, ":"):
				cur.comment = true
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &cur.data)
			}
		}
	}()
	return s
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next event that is not a heartbeat.
func (s *stream) next() sse {
	s.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatal("stream ended")
			}
			if ev.comment {
				continue
			}
			return ev
		case <-timeout:
			s.t.Fatal("no event within 5s")
		}
	}
}

func withBus(b *events.Bus) envOption {
	return func(_ *config.API, o *Options) { o.Backends.Events = b }
}

func listLen(d map[string]any, key string) int {
	l, _ := d[key].([]any)
	return len(l)
}

// TestEventStream: a snapshot of what the token may see first, then the
// changes it may see (a tenant token never sees another tenant's or the
// guard's), heartbeats, and resuming after Last-Event-ID.
func TestEventStream(t *testing.T) {
	bus := events.New(0)
	e := newEnv(t, withBus(bus), func(_ *config.API, o *Options) { o.Heartbeat = 50 * time.Millisecond })
	bus.Publish(events.Event{Type: events.CallCreated, Tenant: "acme"}) // before anyone listens

	admin := e.stream(t, secretAdmin)
	acme := e.stream(t, secretAcme)
	if admin.resp.Header.Get("Content-Type") != "text/event-stream" || admin.resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", admin.resp.Header)
	}
	snap := admin.next()
	if snap.event != "snapshot" || snap.id != "1" {
		t.Fatalf("admin's first event %+v", snap)
	}
	if listLen(snap.data, "calls") != 2 || listLen(snap.data, "registrations") != 2 || listLen(snap.data, "trunks") != 3 || listLen(snap.data, "bans") != 1 {
		t.Errorf("admin snapshot %v", snap.data)
	}
	snap = acme.next()
	if snap.event != "snapshot" {
		t.Fatalf("acme's first event %+v", snap)
	}
	// acme's call and live registration; its trunk and the shared one; no bans.
	if listLen(snap.data, "calls") != 1 || listLen(snap.data, "registrations") != 1 || listLen(snap.data, "trunks") != 2 || snap.data["bans"] != nil {
		t.Errorf("acme snapshot %v", snap.data)
	}

	bus.Publish(events.Event{Type: events.CallAnswered, Tenant: "globex", Data: map[string]string{"id": "g1"}})
	bus.Publish(events.Event{Type: events.BanAdded, Data: map[string]string{"ip": "192.0.2.9"}})
	bus.Publish(events.Event{Type: events.Counters, Data: map[string]int{"calls_active": 3}})
	bus.Publish(events.Event{Type: events.TrunkState, Data: map[string]string{"name": "shared"}})
	bus.Publish(events.Event{Type: events.CallAnswered, Tenant: "acme", Data: map[string]string{"id": "a1"}})

	for _, want := range []string{"call.answered", "ban.added", "counters", "trunk.state", "call.answered"} {
		if ev := admin.next(); ev.event != want {
			t.Fatalf("admin got %s, want %s", ev.event, want)
		}
	}
	ev := acme.next()
	if ev.event != "trunk.state" || ev.id != "5" {
		t.Fatalf("acme got %+v, want the shared trunk's state", ev)
	}
	ev = acme.next()
	if ev.event != "call.answered" || ev.id != "6" || ev.data["tenant"] != "acme" {
		t.Fatalf("acme got %+v", ev)
	}

	// Heartbeats keep an idle stream alive.
	deadline := time.After(5 * time.Second)
	for beat := false; !beat; {
		select {
		case ev := <-acme.events:
			beat = ev.comment
		case <-deadline:
			t.Fatal("no heartbeat")
		}
	}

	// A reconnect after id 3 gets 4..6 (as admin may see them), no snapshot.
	again := e.stream(t, secretAdmin, "Last-Event-ID", "3")
	for _, want := range []string{"4", "5", "6"} {
		if ev := again.next(); ev.id != want || ev.event == "snapshot" {
			t.Fatalf("resumed stream got %+v, want id %s", ev, want)
		}
	}
	// An id from before the ring (or another process) starts from a snapshot.
	fresh := e.stream(t, secretAdmin, "Last-Event-ID", "999")
	if ev := fresh.next(); ev.event != "snapshot" {
		t.Fatalf("unknown Last-Event-ID: %+v", ev)
	}
	// admin holds three streams now; one more is allowed, the fifth is not.
	e.stream(t, secretAdmin)
	if r := e.stream(t, secretAdmin); r.resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fifth stream: %d", r.resp.StatusCode)
	}
	// Without status:read, no stream.
	if r := e.stream(t, scopeSecret(api.ScopeCDR)); r.resp.StatusCode != http.StatusForbidden {
		t.Fatalf("stream without status:read: %d", r.resp.StatusCode)
	}
	// No token in the URL, ever: a query parameter is refused.
	if r := e.get("/v1/events?token="+secretAdmin, secretAdmin); r.status != http.StatusBadRequest {
		t.Fatalf("token in the query: %d", r.status)
	}
}

// TestEventStreamEndsAtShutdown: an open stream does not hold a graceful
// shutdown up.
func TestEventStreamEndsAtShutdown(t *testing.T) {
	bus := events.New(0)
	e := newEnv(t, withBus(bus))
	s := e.stream(t, secretAdmin)
	if ev := s.next(); ev.event != "snapshot" {
		t.Fatalf("first event %+v", ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open stream: %v after %v", err, time.Since(start))
	}
	select {
	case _, ok := <-s.events:
		for ok {
			_, ok = <-s.events
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the stream is still open after shutdown")
	}
}
