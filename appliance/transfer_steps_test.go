package appliance

import (
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/routing"
	"pbx/sipcore/b2bua"
)

// TestTransferSteps: a transfer appends its step (kind, by, to) and its new
// leg's routing steps to the call's, and its outcome lands on both; an
// attended transfer, which routes nothing, gets its step from the event.
func TestTransferSteps(t *testing.T) {
	s := newStepLog()
	id := b2bua.NewCallID(time.Now())
	s.put(id, []routing.Step{{Type: routing.StepRoute, Result: "matched"}, {Type: routing.StepDial}})
	tr := &b2bua.Transfer{Kind: b2bua.TransferBlind, By: "101", To: "102"}
	s.addTransfer(id, tr, []routing.Step{{Type: routing.StepDial}})
	done := *tr
	done.Result, done.SIPStatus = b2bua.CauseBusy, 486
	s.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, At: time.Now(), Call: b2bua.CallInfo{ID: id}, Transfer: &done})
	got := s.get(id)
	if len(got) != 4 {
		t.Fatalf("steps %+v, want 4", got)
	}
	if x := got[2]; x.ID != "3" || x.Type != cdr.StepTransfer || x.Kind != "blind" || x.By != "101" || x.To != "102" || x.Result != "busy" {
		t.Fatalf("transfer step %+v", x)
	}
	if got[3].ID != "4" || got[3].Result != "busy" || got[1].Result != "" {
		t.Fatalf("dial steps %+v and %+v: the transfer's outcome belongs to its own dial only", got[1], got[3])
	}
	att := &b2bua.Transfer{Kind: b2bua.TransferAttended, By: "100", To: "102", Result: b2bua.CauseAnswered}
	s.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, At: time.Now(), Call: b2bua.CallInfo{ID: id}, Transfer: att})
	got = s.get(id)
	if x := got[len(got)-1]; len(got) != 5 || x.Type != cdr.StepTransfer || x.Kind != "attended" || x.Result != "answered" {
		t.Fatalf("steps %+v, want the attended transfer's step last", got)
	}
}
