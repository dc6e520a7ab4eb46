package appliance

import (
	"log/slog"
	"sync"

	"pbx/sipcore/b2bua"
)

// observers fans one call event out to several observers, in order.
type observers []b2bua.Observer

func (o observers) CallEvent(ev b2bua.Event) {
	for _, x := range o {
		x.CallEvent(ev)
	}
}

// mediaLog logs each answered call's per-leg RTP counters when it ends, so an
// operator can see one-way audio (a leg that received nothing) in the journal.
type mediaLog struct {
	log   *slog.Logger
	mu    sync.Mutex
	calls map[b2bua.CallID]b2bua.MediaAccess
}

func newMediaLog(log *slog.Logger) *mediaLog {
	return &mediaLog{log: log, calls: map[b2bua.CallID]b2bua.MediaAccess{}}
}

func (m *mediaLog) CallEvent(ev b2bua.Event) {
	switch ev.Kind {
	case b2bua.EventAnswered:
		m.mu.Lock()
		m.calls[ev.Call.ID] = ev.Media
		m.mu.Unlock()
	case b2bua.EventEnded:
		m.mu.Lock()
		ma, ok := m.calls[ev.Call.ID]
		delete(m.calls, ev.Call.ID)
		m.mu.Unlock()
		if !ok || ma.Caller == nil || ma.Callee == nil {
			return
		}
		a, b := ma.Caller.Stats(), ma.Callee.Stats()
		m.log.Info("media stats", "call", ev.Call.ID, "tenant", ev.Call.Tenant,
			"caller_packets_in", a.PacketsIn, "caller_packets_out", a.PacketsOut, "caller_lost", a.PacketsLost, "caller_jitter_us", a.Jitter.Microseconds(),
			"callee_packets_in", b.PacketsIn, "callee_packets_out", b.PacketsOut, "callee_lost", b.PacketsLost, "callee_jitter_us", b.Jitter.Microseconds())
	}
}
