package webhook

import (
	"sync"
	"time"
)

// LatencyBounds are the upper bounds of the attempt time buckets of Stats.
var LatencyBounds = [...]time.Duration{
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond,
	5 * time.Second, 10 * time.Second, 30 * time.Second,
}

// Stats are the dispatcher's counters since start.
type Stats struct {
	// Deliveries counts settled deliveries by [event, outcome]: delivered
	// (a 2xx), expired (given up at maxAttemptAge), dropped (queue full).
	Deliveries map[[2]string]uint64
	// Attempts counts attempts by result: ok (2xx), status (another
	// answer), error (no answer).
	Attempts map[string]uint64
	// Queued is the deliveries held (waiting or in flight); InFlight the
	// attempts running.
	Queued, InFlight int
	// LatencyCounts counts attempts that got an answer or an error by
	// time, per bucket of LatencyBounds (the last has no bound).
	LatencyCounts [len(LatencyBounds) + 1]uint64
	LatencySum    time.Duration
}

type stats struct {
	mu         sync.Mutex
	deliveries map[[2]string]uint64
	attempts   map[string]uint64
	lat        [len(LatencyBounds) + 1]uint64
	sum        time.Duration
}

func (s *stats) init() {
	s.deliveries = map[[2]string]uint64{}
	s.attempts = map[string]uint64{"ok": 0, "error": 0, "status": 0}
}

func (s *stats) attempt(result string, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[result]++
	if took <= 0 {
		return
	}
	i := 0
	for i < len(LatencyBounds) && took > LatencyBounds[i] {
		i++
	}
	s.lat[i]++
	s.sum += took
}

func (s *stats) delivery(event, outcome string) {
	s.mu.Lock()
	s.deliveries[[2]string{event, outcome}]++
	s.mu.Unlock()
}

// Stats returns the counters since start.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	queued, inflight := d.queued, d.inflight
	d.mu.Unlock()
	s := &d.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{Deliveries: make(map[[2]string]uint64, len(s.deliveries)), Attempts: make(map[string]uint64, len(s.attempts)),
		Queued: queued, InFlight: inflight, LatencyCounts: s.lat, LatencySum: s.sum}
	for k, v := range s.deliveries {
		out.Deliveries[k] = v
	}
	for k, v := range s.attempts {
		out.Attempts[k] = v
	}
	return out
}
