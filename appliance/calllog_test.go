package appliance

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// TestCallLogRecordsEachTenantsSide: an inter-tenant call is recorded in
// both tenants' call logs under the call's id, each with its own extension
// (the callee's tenant: the one called; the caller's: the one calling),
// and the caller named by extension and presented name.
func TestCallLogRecordsEachTenantsSide(t *testing.T) {
	dd := t.TempDir()
	store, err := cdr.New(cdr.Options{DataDir: dd}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l := &callLog{store: store, log: slog.New(slog.DiscardHandler)}
	start := time.Now().Add(-time.Minute)
	c := b2bua.CallInfo{
		ID: b2bua.NewCallID(start), Tenant: "acme", Direction: calls.DirectionInternal, SIPCallID: "sip-1",
		From: "alice", To: "200", Extension: "200", AnsweredBy: "200", Start: start, Answer: start.Add(time.Second),
		Caller: b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100"},
		Meta:   b2bua.Meta{Tenant: "acme", Direction: calls.DirectionInternal, Extension: "200", From: "100", FromName: "Alice"},
		State:  b2bua.StateAnswered,
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventAnswered, Call: c})
	for _, tn := range []string{"acme", "demo"} {
		if _, err := os.Stat(store.MarkerPath(tn, cdr.ID(c.ID))); err != nil {
			t.Errorf("in-flight marker of %s: %v", tn, err)
		}
	}
	c.State, c.End, c.Cause, c.SIPStatus = b2bua.StateEnded, start.Add(time.Minute), calls.CauseAnswered, 200
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: c})
	store.Flush() // the commits finish on the store's committer
	for tn, ext := range map[string]string{"acme": "200", "demo": "100"} {
		rec, err := store.Get(context.Background(), tn, cdr.ID(c.ID))
		if err != nil {
			t.Fatalf("record of %s: %v", tn, err)
		}
		if rec.Tenant != tn || rec.Extension != ext || rec.Direction != calls.DirectionInternal || rec.From != "100" || rec.FromName != "Alice" ||
			rec.AnsweredBy != "200" || rec.Cause != calls.CauseAnswered {
			t.Errorf("%s's record %+v", tn, rec)
		}
		if _, err := os.Stat(store.MarkerPath(tn, cdr.ID(c.ID))); !os.IsNotExist(err) {
			t.Errorf("%s's marker left after commit: %v", tn, err)
		}
	}

	// A call within one tenant has one record.
	c.ID, c.Caller.Tenant, c.Tenant = b2bua.NewCallID(start), "acme", "acme"
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: c})
	if _, err := store.Get(context.Background(), "demo", cdr.ID(c.ID)); err == nil {
		t.Errorf("demo has a record of acme's own call")
	}
}

// TestCallLogRecordsDigits: the caller's digits (RFC 4733 or INFO) reach the
// record's digits with the step that connected the call; a voicemail_check
// step's are never recorded.
func TestCallLogRecordsDigits(t *testing.T) {
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	c := b2bua.CallInfo{
		ID: b2bua.NewCallID(start), Tenant: "acme", Direction: calls.DirectionInternal, Start: start,
		State: b2bua.StateEnded, End: start.Add(time.Minute), Cause: calls.CauseAnswered,
		Digits: []b2bua.Digit{{Digit: "4", At: start.Add(2 * time.Second), Via: b2bua.DigitViaRTP}, {Digit: "#", At: start.Add(3 * time.Second), Via: b2bua.DigitViaINFO}},
	}
	steps := []cdr.Step{{ID: "s1", Type: "dial"}}
	l := &callLog{steps: func(b2bua.CallID) []cdr.Step { return steps }}
	rec := l.record(&c)
	if len(rec.Digits) != 1 || rec.Digits[0].Digits != "4#" || rec.Digits[0].Step != "s1" || rec.Digits[0].Type != "dial" || !rec.Digits[0].At.Equal(start.Add(2*time.Second)) {
		t.Fatalf("digits %+v", rec.Digits)
	}
	steps = []cdr.Step{{ID: "vm", Type: cdr.StepVoicemailCheck}}
	if rec := l.record(&c); len(rec.Digits) != 0 {
		t.Fatalf("voicemail_check digits recorded: %+v", rec.Digits)
	}
}

// endedBenchCall is the internal call, answered and ended a minute after
// it began, that the call log's benchmarks record.
func endedBenchCall() b2bua.CallInfo {
	start := time.Now().Add(-time.Minute)
	return b2bua.CallInfo{
		ID: b2bua.NewCallID(start), Tenant: "acme", Direction: calls.DirectionInternal, SIPCallID: "sip-1",
		From: "alice", To: "200", Extension: "200", AnsweredBy: "200", Start: start, Answer: start.Add(time.Second),
		End: start.Add(time.Minute), Cause: calls.CauseAnswered, SIPStatus: 200, State: b2bua.StateEnded,
		Legs: []b2bua.LegInfo{{Target: "200", Start: start, Answer: start.Add(time.Second), End: start.Add(time.Minute), SIPStatus: 200, Won: true}},
	}
}

// BenchmarkRecordOf measures building a call's record from its snapshot,
// which the call log does twice a call (at answer, at the end): it takes
// the call's id, so no id is drawn (a random read and a time formatting).
//
//	go test -run '^$' -bench RecordOf ./appliance/
func BenchmarkRecordOf(b *testing.B) {
	c := endedBenchCall()
	c.Caller = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Username: "alice", Extension: "100"}
	c.Meta = b2bua.Meta{Tenant: "acme", Direction: calls.DirectionInternal, Extension: "200", From: "100", FromName: "Alice"}
	b.ReportAllocs()
	for b.Loop() {
		if r := recordOf(&c); r.ID != cdr.ID(c.ID) {
			b.Fatal(r.ID)
		}
	}
}

// TestCallLogEventsAllocation: the events the call log does not record
// (created, ringing, a leg's end, hold) cost it no allocation, and an
// answered call's marker only what the store allocates: the event is not
// copied to the heap for the commit's callback, which only an ended call
// has.
func TestCallLogEventsAllocation(t *testing.T) {
	store, err := cdr.New(cdr.Options{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l := &callLog{store: store, log: slog.New(slog.DiscardHandler)}
	start := time.Now().Add(-time.Minute)
	c := b2bua.CallInfo{
		ID: b2bua.NewCallID(start), Tenant: "acme", Direction: calls.DirectionInbound, SIPCallID: "sip-1",
		From: "+15551230001", To: "200", Extension: "200", Start: start, State: b2bua.StateRinging,
		Legs: []b2bua.LegInfo{{Target: "200", Start: start}},
	}
	for _, k := range []b2bua.EventKind{b2bua.EventCreated, b2bua.EventRinging, b2bua.EventLegEnded, b2bua.EventHeld} {
		if n := testing.AllocsPerRun(100, func() { l.CallEvent(b2bua.Event{Kind: k, Call: c}) }); n != 0 {
			t.Errorf("%s event: %.0f allocations, want none", k, n)
		}
	}
}

// BenchmarkCallLogRecord measures the call log's record of an ended call
// with three routing steps, taken from the steps' copy as they are (not
// appended one by one into a slice grown each time).
//
//	go test -run '^$' -bench CallLogRecord ./appliance/
func BenchmarkCallLogRecord(b *testing.B) {
	c := endedBenchCall()
	steps := []cdr.Step{{ID: "1", Type: "time_condition", Result: "open"}, {ID: "2", Type: "menu", Result: "1"}, {ID: "3", Type: "dial"}}
	l := &callLog{steps: func(b2bua.CallID) []cdr.Step { return append([]cdr.Step(nil), steps...) }}
	b.ReportAllocs()
	for b.Loop() {
		if r := l.record(&c); len(r.Steps) != 3 || r.Steps[2].Result != string(calls.CauseAnswered) {
			b.Fatalf("steps %+v", r.Steps)
		}
	}
}
