package appliance

import (
	"log/slog"
	"sync"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/recording"
	"pbx/appliance/routing"
	"pbx/sipcore/b2bua"
)

// newRecordings opens the recordings under dataDir and promotes what a
// crash left in flight; it runs before any listener opens.
func newRecordings(dataDir string, cfg *config.Config, log *slog.Logger) (*recording.Store, error) {
	s, err := recording.New(recording.Options{DataDir: dataDir, Location: cfg.LocationFunc()}, log)
	if err != nil {
		return nil, err
	}
	actions, err := s.Recover()
	for _, act := range actions {
		log.Warn("recording recovery", "action", act)
	}
	if err != nil {
		// A file that cannot be promoted stays where it is, for an
		// operator; it does not keep the PBX from taking calls.
		log.Error("recording recovery", "err", err)
	}
	return s, nil
}

// callRecorder applies the recording policy when a call is bridged: the
// decision becomes the call record's `record` step, and an armed call is
// recorded from its two RTP legs until it ends. It runs before the call
// log among the observers, so the step is in the in-flight marker too.
type callRecorder struct {
	policy *recording.Policy
	store  *recording.Store
	steps  *stepLog
	log    *slog.Logger

	mu     sync.Mutex
	active map[b2bua.CallID]*recording.Recorder
}

func newCallRecorder(p *recording.Policy, s *recording.Store, steps *stepLog, log *slog.Logger) *callRecorder {
	return &callRecorder{policy: p, store: s, steps: steps, log: log, active: map[b2bua.CallID]*recording.Recorder{}}
}

func (r *callRecorder) CallEvent(ev b2bua.Event) {
	c := &ev.Call
	switch ev.Kind {
	case b2bua.EventAnswered:
		if c.Tenant == "" {
			return // no tenant, no call record, nowhere to file a recording
		}
		d := r.policy.Decide(c)
		step := cdr.Step{Type: routing.StepRecord, At: ev.At, Result: d.Result()}
		if d.Record {
			legs := recording.Legs{Caller: ev.Media.Caller, Callee: ev.Media.Callee, PayloadType: ev.Media.PayloadType}
			rec, err := r.store.Start(sidecarOf(c), legs, ev.At)
			if err != nil {
				r.log.Error("recording not started", "call", c.ID, "tenant", c.Tenant, "err", err)
				step.Error = "the recording could not be started"
			} else {
				r.mu.Lock()
				r.active[c.ID] = rec
				r.mu.Unlock()
			}
		}
		r.steps.insertBeforeLast(c.ID, step)
	case b2bua.EventEnded:
		r.mu.Lock()
		rec, ok := r.active[c.ID]
		delete(r.active, c.ID)
		r.mu.Unlock()
		if !ok {
			return
		}
		end := c.End
		if end.IsZero() {
			end = ev.At
		}
		id, tenant := c.ID, c.Tenant
		sc := sidecarOf(c)
		if sc.End.IsZero() {
			sc.End = end.UTC().Truncate(time.Millisecond)
		}
		rec.Stop(sc, end, func(sc *recording.Sidecar, err error) {
			if err != nil {
				r.log.Error("recording not finished", "call", id, "tenant", tenant, "err", err)
				return
			}
			r.log.Info("recording finished", "call", id, "tenant", tenant, "duration_ms", sc.DurationMS, "bytes", sc.Bytes, "dropped", rec.Dropped())
		})
	}
}

// sidecarOf is what a call's sidecar says of it, as its call record does.
func sidecarOf(c *b2bua.CallInfo) recording.Sidecar {
	from, _ := callerOf(c)
	rec := recordOf(c)
	sc := recording.Sidecar{ID: string(c.ID), Tenant: c.Tenant, CallID: c.SIPCallID, Direction: string(rec.Direction),
		From: from, To: c.To, DID: c.DID, Trunk: c.Trunk, AnsweredBy: c.AnsweredBy, Start: c.Start.UTC().Truncate(time.Millisecond)}
	if !c.End.IsZero() {
		sc.End = c.End.UTC().Truncate(time.Millisecond)
	}
	return sc
}
