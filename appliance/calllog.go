package appliance

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/webhook"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// callLog turns call events into call records: an in-flight marker when a call is
// answered, one committed record when it ends (answered or not).
type callLog struct {
	store *cdr.Store
	log   *slog.Logger
	// steps returns a copy of the routing steps of a call, the caller's
	// to keep (nil: none recorded).
	steps func(b2bua.CallID) []cdr.Step
	// hooks sends the call.ended webhook of each committed record; nil:
	// none.
	hooks *webhook.Dispatcher
}

func (l *callLog) CallEvent(ev b2bua.Event) {
	if ev.Call.Tenant == "" && (ev.Kind == b2bua.EventAnswered || ev.Kind == b2bua.EventEnded) {
		// A call on a shared trunk to a number no tenant claims: call
		// records live under a tenant, so this one is only logged.
		if ev.Kind == b2bua.EventEnded {
			l.log.Info("call of no tenant not recorded", "call", ev.Call.ID, "trunk", ev.Call.Trunk, "to", ev.Call.To,
				"source", ev.Call.Source, "cause", ev.Call.Cause, "reason", ev.Call.Reason)
		}
		return
	}
	if ev.Kind != b2bua.EventAnswered && ev.Kind != b2bua.EventEnded {
		return
	}
	rec := l.record(&ev.Call)
	// Each tenant that sees the call (both, on an inter-tenant call) gets
	// its record under the call's id.
	for _, sd := range sidesOf(&ev.Call) {
		// A record that cannot be written (a full disk) is kept and
		// retried by the store, which logs the backlog once a minute and
		// reports it in /v1/status; so does a full backlog.
		if ev.Kind == b2bua.EventAnswered {
			r := rec // on the stack: the store keeps a copy
			r.Tenant, r.Extension = sd.Tenant, sd.Extension
			if err := l.store.Answered(&r); err != nil && !errors.Is(err, cdr.ErrBacklogFull) {
				l.log.Error("write in-flight call record", "call", ev.Call.ID, "tenant", sd.Tenant, "err", err)
			}
			continue
		}
		l.commit(&rec, sd, ev.Call.ID)
	}
}

// commit hands the final record of call id, rec as seen by side sd, to
// the store. The record file is written here; the fdatasync that makes
// it durable (shared with the other calls ending) is waited for by the
// store, not by the call's goroutine, which holds the INVITE's
// transaction and the call's limits until it returns. (A function of its
// own so that only this copy of the record, which done keeps, goes to
// the heap, not the event of every call event.)
func (l *callLog) commit(rec *cdr.Record, sd side, id b2bua.CallID) {
	r := *rec
	r.Tenant, r.Extension = sd.Tenant, sd.Extension
	l.store.CommitThen(&r, func(err error) { l.committed(&r, id, err) })
}

// committed reports the commit of record r of call id: an error is
// logged, a record durably stored goes out in the call.ended webhook.
func (l *callLog) committed(r *cdr.Record, id b2bua.CallID, err error) {
	if err != nil {
		if !errors.Is(err, cdr.ErrBacklogFull) {
			l.log.Error("commit call record", "call", id, "tenant", r.Tenant, "err", err)
		}
		return
	}
	if l.hooks != nil {
		// Beyond the specification: the record as stored, durably.
		if err := l.hooks.Send(r.Tenant, webhook.EventCallEnded, r); err != nil {
			l.log.Error("queue call.ended webhook", "call", id, "tenant", r.Tenant, "err", err)
		}
	}
}

// Test knobs: the end-to-end tests shorten the marker refresh and the
// retry backoff of the call record store, which the configuration does not
// expose (the defaults are what an operator wants). Durations in Go syntax.
const (
	envCDRMarkerRefresh = "PBX_TEST_CDR_MARKER_REFRESH"
	envCDRRetryMax      = "PBX_TEST_CDR_RETRY_MAX"
)

// cdrTestKnobs applies the test knobs set in the environment to o.
func cdrTestKnobs(o cdr.Options) cdr.Options {
	if d, err := time.ParseDuration(os.Getenv(envCDRMarkerRefresh)); err == nil && d > 0 {
		o.MarkerRefresh = d
	}
	if d, err := time.ParseDuration(os.Getenv(envCDRRetryMax)); err == nil && d > 0 {
		o.RetryMax = d
		o.RetryMin = min(cdr.DefaultRetryMin, d)
	}
	return o
}

// record is recordOf with the call's routing steps. The last step that has
// no result yet (the dial or ring group) takes the call's outcome.
func (l *callLog) record(c *b2bua.CallInfo) cdr.Record {
	rec := recordOf(c)
	if l.steps != nil {
		// The steps come copied: the record takes them as they are, not
		// appended one by one into a slice grown each time.
		if steps := l.steps(c.ID); rec.Steps == nil {
			rec.Steps = steps
		} else {
			rec.Steps = append(rec.Steps, steps...)
		}
		if n := len(rec.Steps); n > 0 && rec.Steps[n-1].Result == "" && c.State == b2bua.StateEnded {
			rec.Steps[n-1].Result = string(causeOf(c.Cause))
		}
	}
	addDigits(&rec, c.Digits)
	return rec
}

// addDigits records the DTMF the caller sent once connected (as RFC 4733
// or SIP INFO) with the step that connected the call, the last one: one
// entry holding every digit, at the first digit's time. A voicemail_check
// step's digits (a PIN) are dropped by the record.
func addDigits(rec *cdr.Record, ds []b2bua.Digit) {
	if len(ds) == 0 {
		return
	}
	var st cdr.Step
	if n := len(rec.Steps); n > 0 {
		st = rec.Steps[n-1]
	}
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.Digit)
	}
	rec.AddDigits(st.ID, st.Type, b.String(), ds[0].At.UTC().Truncate(time.Millisecond))
}

// recordOf builds the call record from a call snapshot. The record id is the call id,
// so the in-flight marker and the committed record are the same file name.
// It is a value, which the call log keeps on its stack (BenchmarkRecordOf).
func recordOf(c *b2bua.CallInfo) cdr.Record {
	dir := c.Direction
	if dir == "" {
		// A call refused before routing decided: a trunk's call was inbound,
		// a phone's internal until outbound routing says otherwise.
		dir = calls.DirectionInternal
		if c.Caller.Kind == b2bua.KindTrunk {
			dir = calls.DirectionInbound
		}
	}
	rec := cdr.RecordOf(cdr.ID(c.ID), c.Tenant, dir, c.Start)
	rec.CallID = c.SIPCallID
	rec.DialogID = c.DialogID
	rec.From, rec.FromName = c.Calling()
	rec.To = c.To
	rec.DID = c.DID
	rec.Trunk = c.Trunk
	rec.Source = c.Source
	rec.Extension = c.Extension
	rec.AnsweredBy = c.AnsweredBy
	if !c.Answer.IsZero() {
		a := c.Answer.UTC().Truncate(time.Millisecond)
		rec.Answer = &a
	}
	for _, lg := range c.Legs {
		leg := cdr.Leg{
			Target:    lg.Target,
			Kind:      lg.Kind,
			Start:     lg.Start.UTC().Truncate(time.Millisecond),
			End:       lg.End.UTC().Truncate(time.Millisecond),
			SIPStatus: lg.SIPStatus,
			Won:       lg.Won,
			Cause:     causeOf(lg.Cause),
		}
		if !lg.Answer.IsZero() {
			a := lg.Answer.UTC().Truncate(time.Millisecond)
			leg.Answer = &a
		}
		rec.AddLeg(leg)
	}
	end := c.End
	if end.IsZero() {
		end = time.Now()
	}
	if c.State == b2bua.StateEnded {
		rec.Finish(end, causeOf(c.Cause), c.SIPStatus, c.Reason)
	}
	return rec
}

// causeOf is a call or leg cause as the record shows it: one not valid
// (none given) is an error.
func causeOf(c calls.Cause) calls.Cause {
	if c.Valid() {
		return c
	}
	return calls.CauseError
}
