package appliance

import (
	"context"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/events"
	"pbx/appliance/guard"
	"pbx/appliance/recording"
	"pbx/rtpcore"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
	"pbx/web/api"
)

// countersEvery is how often the headline counters are published.
const countersEvery = 5 * time.Second

// live publishes the PBX's state changes on the lossy event bus (the
// dashboard, the event stream and the metrics read them). Each datum is the
// object the management API shows for it, so a reader of the stream and a
// reader of the API see the same thing. Nothing that must not be lost goes
// this way: call records are written by the call log directly.
type live struct{ bus *events.Bus }

var callEvents = map[b2bua.EventKind]events.Type{
	b2bua.EventCreated:  events.CallCreated,
	b2bua.EventRinging:  events.CallRinging,
	b2bua.EventAnswered: events.CallAnswered,
	b2bua.EventHeld:     events.CallHeld, // its data says held: true
	b2bua.EventResumed:  events.CallHeld, // and held: false
	b2bua.EventEnded:    events.CallEnded,
}

// CallEvent publishes a call's change once for each tenant that sees it
// (both, for a call between tenants), as /v1/calls lists it.
func (l live) CallEvent(ev b2bua.Event) {
	typ, ok := callEvents[ev.Kind]
	if !ok {
		return
	}
	call := apiCall(&ev.Call)
	if ev.Kind == b2bua.EventEnded {
		call.Cause = causeOf(ev.Call.Cause)
	}
	sides := sidesOf(&ev.Call)
	if len(sides) == 0 {
		l.bus.Publish(events.Event{Type: typ, At: ev.At, Data: call})
		return
	}
	for _, sd := range sides {
		c := call
		c.Tenant = sd.Tenant
		l.bus.Publish(events.Event{Type: typ, At: ev.At, Tenant: sd.Tenant, Data: c})
	}
}

var bindingEvents = map[registrar.Change]events.Type{
	registrar.Added:     events.RegistrationAdded,
	registrar.Refreshed: events.RegistrationRefreshed,
	registrar.Removed:   events.RegistrationRemoved,
	registrar.Expired:   events.RegistrationExpired,
}

func (l live) binding(c registrar.Change, b registrar.Binding) {
	l.bus.Publish(events.Event{Type: bindingEvents[c], Tenant: b.Tenant, Data: apiRegistration(b)})
}

func (l live) trunk(st trunk.Status) {
	l.bus.Publish(events.Event{Type: events.TrunkState, Tenant: st.Tenant, Data: apiTrunk(st)})
}

// voicemail publishes a mailbox's counts after a change.
func (l live) voicemail(tenant, ext string, unheard, saved int) {
	l.bus.Publish(events.Event{Type: events.VoicemailChanged, Tenant: tenant,
		Data: map[string]any{"extension": ext, "new": unheard, "saved": saved}})
}

// recording publishes a finished recording's sidecar.
func (l live) recording(sc *recording.Sidecar) {
	l.bus.Publish(events.Event{Type: events.RecordingFinished, Tenant: sc.Tenant, Data: sc})
}

func (l live) ban(b guard.Ban)  { l.bus.Publish(events.Event{Type: events.BanAdded, Data: apiBan(b)}) }
func (l live) lift(b guard.Ban) { l.bus.Publish(events.Event{Type: events.BanLifted, Data: apiBan(b)}) }

// headline is the data of a counters event.
type headline struct {
	CallsActive   int `json:"calls_active"`
	Registrations int `json:"registrations"`
	TrunksUp      int `json:"trunks_up"`
	TrunksDown    int `json:"trunks_down"`
	BansActive    int `json:"bans_active"`
}

// runCounters publishes the system's headline counters every
// countersEvery until ctx ends.
func (l live) runCounters(ctx context.Context, src *apiSources, g *guard.Guard) error {
	t := time.NewTicker(countersEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		snap, err := src.Status(ctx)
		if err != nil {
			continue
		}
		h := headline{BansActive: len(g.Bans())}
		for _, c := range append([]api.Counts{snap.Shared}, values(snap.Tenants)...) {
			h.CallsActive += c.CallsActive
			h.Registrations += c.Registrations
			h.TrunksUp += c.TrunksUp
			h.TrunksDown += c.TrunksDown
		}
		l.bus.Publish(events.Event{Type: events.Counters, Data: h})
	}
}

func values[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// mediaSource reads the relay's totals for the metrics.
type mediaSource struct{ e *rtpcore.Engine }

func (m mediaSource) Media(ctx context.Context) (api.MediaTotals, error) {
	t := m.e.Totals()
	st := m.e.Stats()
	return api.MediaTotals{
		PortsInUse: st.PortsInUse, PortsResting: st.PortsQuarantined, PortsFree: st.PortsTotal - st.PortsInUse - st.PortsQuarantined,
		PortsExhausted: st.PortsExhausted, KernelDirections: st.KernelDirections, KernelMoves: st.KernelMoves,
		Legs: t.Legs, PacketsIn: t.PacketsIn, PacketsOut: t.PacketsOut, BytesIn: t.BytesIn, BytesOut: t.BytesOut,
		PacketsLost: t.PacketsLost, Strays: t.Strays,
		Jitter: histogram(rtpcore.JitterBounds[:], t.JitterCounts[:], t.JitterSum),
	}, nil
}

// callLogStats reads the call record writer's counters for the metrics.
type callLogStats struct{ s *cdr.Store }

func (c callLogStats) CallLogStats(ctx context.Context) (api.CallLogStats, error) {
	st := c.s.Stats()
	return api.CallLogStats{Commits: st.Commits + st.Retried, Pending: st.Pending,
		CommitTime: histogram(cdr.CommitBounds[:], st.Commit.Counts[:], st.Commit.Sum),
		MarkerTime: histogram(cdr.CommitBounds[:], st.Marker.Counts[:], st.Marker.Sum),
		RecordTime: histogram(cdr.CommitBounds[:], st.Record.Counts[:], st.Record.Sum)}, nil
}

// histogram turns per-bucket counts (the last one unbounded) into the
// cumulative form the metrics expose, in seconds.
func histogram(bounds []time.Duration, counts []uint64, sum time.Duration) api.Histogram {
	h := api.Histogram{Buckets: make(map[float64]uint64, len(bounds)), Sum: sum.Seconds()}
	for i, n := range counts {
		h.Count += n
		if i < len(bounds) {
			h.Buckets[bounds[i].Seconds()] = h.Count
		}
	}
	return h
}

// sipSource reads the SIP stack's transport counters for the metrics.
type sipSource struct{ s *sipcore.Server }

func (x sipSource) SIP(ctx context.Context) (api.SIPStats, error) {
	st, tcp := x.s.Stats(), x.s.TCPStats()
	return api.SIPStats{
		OpenTransactions: st.OpenTransactions, UDPSources: st.UDPPoolEntries,
		Refused: map[string]uint64{"over_cap": st.RefusedOverCap, "version": st.VersionRejected, "too_large": st.TooLarge},
		Dropped: map[string]uint64{"bad_version": st.BadVersionDropped, "too_large": st.TooLargeDropped,
			"malformed": st.MalformedDropped, "queue_full": st.QueueDropped},
		TCPOpen: tcp.Open, TCPAccepted: tcp.Accepted, TCPAcceptErrors: tcp.AcceptErrors,
		TCPRefused: map[string]uint64{"total": tcp.RefusedTotal, "per_source": tcp.RefusedSource},
		TCPClosed: map[string]uint64{"idle": tcp.IdleClosed, "incomplete": tcp.IncompleteClosed, "oversize": tcp.Oversize,
			"malformed": tcp.Malformed, "throttled": tcp.Throttled},
	}, nil
}
