package dialplan

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/cdr"
	"pbx/appliance/guard"
	"pbx/appliance/routing"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// TestTransferSteps: a transfer appends its step (kind, by, to) and its new
// leg's routing steps to the call's, and its outcome lands on both; an
// attended transfer, which routes nothing, gets its step from the event.
func TestTransferSteps(t *testing.T) {
	s := NewSteps()
	id := b2bua.NewCallID(time.Now())
	s.Put(id, []routing.Step{{Type: routing.StepRoute, Result: "matched"}, {Type: routing.StepDial}})
	tr := &b2bua.Transfer{Kind: b2bua.TransferBlind, By: "101", To: "102"}
	s.AddTransfer(id, tr, []routing.Step{{Type: routing.StepDial}})
	done := *tr
	done.Result, done.SIPStatus = calls.CauseBusy, 486
	s.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, At: time.Now(), Call: b2bua.CallInfo{ID: id}, Transfer: &done})
	got := s.Get(id)
	if len(got) != 4 {
		t.Fatalf("steps %+v, want 4", got)
	}
	if x := got[2]; x.ID != "3" || x.Type != cdr.StepTransfer || x.Kind != "blind" || x.By != "101" || x.To != "102" || x.Result != "busy" {
		t.Fatalf("transfer step %+v", x)
	}
	if got[3].ID != "4" || got[3].Result != "busy" || got[1].Result != "" {
		t.Fatalf("dial steps %+v and %+v: the transfer's outcome belongs to its own dial only", got[1], got[3])
	}
	att := &b2bua.Transfer{Kind: b2bua.TransferAttended, By: "100", To: "102", Result: calls.CauseAnswered}
	s.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, At: time.Now(), Call: b2bua.CallInfo{ID: id}, Transfer: att})
	got = s.Get(id)
	if x := got[len(got)-1]; len(got) != 5 || x.Type != cdr.StepTransfer || x.Kind != "attended" || x.Result != "answered" {
		t.Fatalf("steps %+v, want the attended transfer's step last", got)
	}
}

// TestRouteTransfer: a transfer's target is routed as a call from the
// transferor: bob, who answered alice, to the sequential ring group (as
// his own account, found by extension); alice to an external number through
// the trunk with the tenant's caller id, although her per-account limit is
// taken by the call she hands on; and zed's second outbound setup within a
// minute is refused by the limits. Each transfer appends its steps.
func TestRouteTransfer(t *testing.T) {
	r := newTestRouter(t)
	alice := b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100", DisplayName: "Alice"}
	id := b2bua.NewCallID(time.Now())
	d := r.Route(context.Background(), &b2bua.Inbound{ID: id, Caller: alice,
		RequestURI: sip.Uri{User: "101", Host: "demo.test"}, To: sip.Uri{User: "101", Host: "demo.test"}})
	if d.Reject != nil {
		t.Fatalf("call refused: %+v", d.Reject)
	}
	first := len(r.steps.Get(id))

	bob := b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Extension: "101"}
	seq := sip.Uri{User: "seq", Host: "demo.test"}
	d = r.Route(context.Background(), &b2bua.Inbound{ID: id, Caller: bob, RequestURI: seq, To: seq,
		Transfer: &b2bua.Transfer{Kind: b2bua.TransferBlind, By: "101", To: "seq"}})
	if d.Reject != nil || d.Target == nil || len(d.Target.Legs) != 2 {
		t.Fatalf("transfer to the ring group: %+v", d)
	}
	if d.Target.CallerID.User != "101" || d.Target.Legs[1].Delay == 0 {
		t.Errorf("caller id %+v, legs %+v: want bob presented and the group's sequence", d.Target.CallerID, d.Target.Legs)
	}
	st := r.steps.Get(id)
	if len(st) < first+2 || st[first].Type != "transfer" || st[first].By != "101" || st[first].To != "seq" || st[len(st)-1].Type != routing.StepRingGroup {
		t.Fatalf("steps %+v", st)
	}
	r.limits.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, Call: b2bua.CallInfo{ID: id}, Transfer: &b2bua.Transfer{Result: calls.CauseNoAnswer}})

	ext := sip.Uri{User: "0123456", Host: "demo.test"}
	d = r.Route(context.Background(), &b2bua.Inbound{ID: id, Caller: alice, RequestURI: ext, To: ext,
		Transfer: &b2bua.Transfer{Kind: b2bua.TransferBlind, By: "100", To: "0123456"}})
	if d.Reject != nil || d.Target == nil || len(d.Target.Legs) != 1 || d.Target.Legs[0].Kind != b2bua.KindTrunk {
		t.Fatalf("transfer to an external number: %+v", d)
	}
	if d.Target.CallerID.User != "+15550100" || d.Target.Meta.Egress != b2bua.KindTrunk {
		t.Errorf("caller id %+v meta %+v", d.Target.CallerID, d.Target.Meta)
	}

	zed := b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Username: "zed", Extension: "200"}
	out := sip.Uri{User: "0999", Host: "acme.test"}
	id2 := b2bua.NewCallID(time.Now())
	if d := r.Route(context.Background(), &b2bua.Inbound{ID: id2, Caller: zed, RequestURI: out, To: out}); d.Reject != nil {
		t.Fatalf("zed's outbound call refused: %+v", d.Reject)
	}
	ext2 := sip.Uri{User: "0123456", Host: "acme.test"}
	d = r.Route(context.Background(), &b2bua.Inbound{ID: id2, Caller: zed, RequestURI: ext2, To: ext2,
		Transfer: &b2bua.Transfer{Kind: b2bua.TransferBlind, By: "200", To: "0123456"}})
	if d.Reject == nil || d.Reject.Status != 403 || !errors.Is(d.Reject.Err, guard.ErrOutboundPerMinute) {
		t.Fatalf("a second outbound setup within the minute: %+v, want 403", d.Reject)
	}
}
