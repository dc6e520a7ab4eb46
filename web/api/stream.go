package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"pbx/appliance/events"
)

// EventSource is the live event bus. *events.Bus implements it.
type EventSource interface {
	Subscribe(size int, filter func(events.Event) bool) *events.Subscription
	Since(id uint64) ([]events.Event, bool)
	Last() uint64
}

// Event stream limits.
const (
	// MaxStreamsPerToken bounds the event streams one token holds open.
	MaxStreamsPerToken = 4
	// streamQueue is each stream's queue on the bus: a reader that falls
	// this far behind gets a resync and a fresh snapshot.
	streamQueue = 512
	// DefaultHeartbeat keeps proxies and the browser from closing an idle
	// stream, and lets a dead peer be noticed.
	DefaultHeartbeat = 15 * time.Second
)

// streams counts open event streams per token name.
type streams struct {
	mu   sync.Mutex
	open map[string]int
}

func (s *streams) acquire(name string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[string]int{}
	}
	if s.open[name] >= MaxStreamsPerToken {
		return nil, false
	}
	s.open[name]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.open[name]--; s.open[name] <= 0 {
			delete(s.open, name)
		}
	}, true
}

// snapshot is the data of a "snapshot" event: the state an event stream
// starts from, as the caller may see it.
type snapshot struct {
	// Token describes the caller, so a page knows which actions to offer.
	Token         tokenInfo      `json:"token"`
	Calls         []Call         `json:"calls"`
	Registrations []Registration `json:"registrations"`
	Trunks        []Trunk        `json:"trunks"`
	// Bans is absent for a caller that may not read the guard.
	Bans []Ban `json:"bans,omitempty"`
}

type tokenInfo struct {
	Name    string   `json:"name"`
	Scopes  []string `json:"scopes"`
	Tenants []string `json:"tenants"`
}

// visibleEvent reports whether p may see e: guard events only with
// security:read and no tenant restriction; a tenant-scoped caller sees its
// tenants' events and shared trunks' state, nothing system-wide.
func visibleEvent(p *Principal, e events.Event) bool {
	if e.Type.Security() {
		return !p.Restricted() && p.HasScope(ScopeSecurity)
	}
	if !p.Restricted() {
		return true
	}
	if e.Tenant == "" {
		return e.Type == events.TrunkState
	}
	return p.SeesTenant(e.Tenant)
}

func (h *Handler) snapshot(r *http.Request, p *Principal) (snapshot, error) {
	snap := snapshot{Token: tokenInfo{Name: p.Name, Scopes: nonNil(p.Scopes), Tenants: nonNil(p.Tenants)}}
	var err error
	if h.b.Calls != nil {
		if snap.Calls, err = h.visibleCalls(r); err != nil {
			return snap, err
		}
	}
	if h.b.Trunks != nil {
		if snap.Trunks, err = h.visibleTrunks(r); err != nil {
			return snap, err
		}
	}
	if h.b.Registrations != nil {
		all, err := h.b.Registrations.Registrations(r.Context())
		if err != nil {
			return snap, Internal(fmt.Errorf("registrations: %w", err))
		}
		now := h.now()
		for _, g := range all {
			if g.Online(now) && (!p.Restricted() || p.SeesTenant(g.Tenant)) {
				snap.Registrations = append(snap.Registrations, g)
			}
		}
	}
	if h.b.Guard != nil && !p.Restricted() && p.HasScope(ScopeSecurity) {
		bs, err := h.b.Guard.Bans(r.Context())
		if err != nil {
			return snap, Internal(fmt.Errorf("bans: %w", err))
		}
		snap.Bans = nonNil(bs)
	}
	snap.Calls, snap.Registrations, snap.Trunks = nonNil(snap.Calls), nonNil(snap.Registrations), nonNil(snap.Trunks)
	return snap, nil
}

// sseWriter writes Server-Sent Events and flushes each one.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s sseWriter) event(id uint64, typ events.Type, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", typ, err)
	}
	if id > 0 {
		if _, err := fmt.Fprintf(s.w, "id: %d\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", typ, body); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// eventStream serves GET /v1/events: Server-Sent Events, a snapshot of the
// caller's view first (or, with a Last-Event-ID still in the bus's ring, the
// events after it), then every change, with heartbeats. After a resync (the
// stream fell behind) a new snapshot follows.
func (h *Handler) eventStream(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.Events == nil {
		return NotRunning("event stream")
	}
	release, ok := h.streams.acquire(p.Name)
	if !ok {
		return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
			Message: fmt.Sprintf("at most %d event streams per token", MaxStreamsPerToken)}
	}
	defer release()
	sub := h.b.Events.Subscribe(streamQueue, func(e events.Event) bool { return visibleEvent(p, e) })
	defer sub.Close()

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := sseWriter{w: w, rc: http.NewResponseController(w)}
	if r.Method == http.MethodHead {
		return nil
	}

	sendSnapshot := func() error {
		last := h.b.Events.Last()
		snap, err := h.snapshot(r, p)
		if err != nil {
			return err
		}
		return out.event(last, events.Snapshot, snap)
	}
	var seen uint64
	replayed := false
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if id, err := strconv.ParseUint(v, 10, 64); err == nil && id > 0 {
			if evs, ok := h.b.Events.Since(id); ok {
				for _, e := range evs {
					if visibleEvent(p, e) {
						if err := out.event(e.ID, e.Type, e); err != nil {
							return nil
						}
					}
					seen = e.ID
				}
				seen, replayed = max(seen, id), true
			}
		}
	}
	if !replayed {
		seen = h.b.Events.Last()
		if err := sendSnapshot(); err != nil {
			h.log.Debug("event stream ended", "token", p.Name, "err", err)
			return nil
		}
	}

	beat := time.NewTicker(h.heartbeat)
	defer beat.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return nil
		case <-h.closing:
			return nil
		case <-beat.C:
			err = out.comment("heartbeat")
		case e := <-sub.C:
			switch {
			case e.Type == events.Resync:
				if err = out.event(0, events.Resync, e.Data); err == nil {
					err = sendSnapshot()
				}
			case e.ID > seen:
				err = out.event(e.ID, e.Type, e)
			}
		}
		if err != nil {
			h.log.Debug("event stream ended", "token", p.Name, "err", err)
			return nil
		}
	}
}
