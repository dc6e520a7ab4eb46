package dialplan

import (
	"context"
	"testing"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/routing"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// fakeMailboxes has mailboxes for the extensions it lists; its apps name
// what they were made for.
type fakeMailboxes map[string]bool

type vmApp struct {
	kind, tenant, ext string
	caller            b2bua.Caller
}

func (vmApp) Run(context.Context, b2bua.Channel) calls.Cause { return "" }

func (f fakeMailboxes) Mailbox(tn, ext string) bool { return f[tn+"/"+ext] }
func (f fakeMailboxes) Deposit(tn, ext string) b2bua.App {
	return vmApp{kind: "deposit", tenant: tn, ext: ext}
}
func (f fakeMailboxes) Check(tn, ext string, c b2bua.Caller) b2bua.App {
	return vmApp{kind: "check", tenant: tn, ext: ext, caller: c}
}

func newVoicemailRouter(t *testing.T, boxes fakeMailboxes) *Dialplan {
	r := newTestRouter(t)
	if boxes != nil {
		r.vm = boxes
	}
	return r
}

var alice = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100", DisplayName: "Alice"}

// routeOnce routes in and releases its call limits at once, as the call's
// end would (alice may hold one call at a time).
func routeOnce(t *testing.T, r *Dialplan, in *b2bua.Inbound) b2bua.Decision {
	t.Helper()
	d := route(t, r, in)
	r.limits.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: in.ID}})
	return d
}

func dial(user string) *b2bua.Inbound {
	return &b2bua.Inbound{Caller: alice, From: sip.Uri{User: "alice", Host: "demo.test"},
		RequestURI: sip.Uri{User: user, Host: "demo.test"}, To: sip.Uri{User: user, Host: "demo.test"}}
}

// TestDialFallsBackToVoicemail: an extension with a mailbox and a phone is
// dialled with a next step; a busy or unanswered dial hands the caller to
// the mailbox's deposit, and the record's steps say so. A cancelled call
// does not.
func TestDialFallsBackToVoicemail(t *testing.T) {
	r := newVoicemailRouter(t, fakeMailboxes{"demo/101": true})
	for _, cause := range []calls.Cause{calls.CauseBusy, calls.CauseNoAnswer} {
		in := dial("101")
		d := routeOnce(t, r, in)
		if d.Reject != nil || d.Target == nil || len(d.Target.Legs) == 0 || d.Target.Next == nil {
			t.Fatalf("decision %+v: want legs and a next step", d)
		}
		next := d.Target.Next(context.Background(), b2bua.Failure{Cause: cause, Status: 486})
		app, ok := next.App.(vmApp)
		if !ok || app.kind != "deposit" || app.tenant != "demo" || app.ext != "101" || len(next.Legs) != 0 {
			t.Fatalf("%s: next %+v", cause, next)
		}
		st := r.steps.Get(in.ID)
		if len(st) != 2 || st[0].Type != routing.StepDial || st[0].Result != string(cause) || st[1].Type != routing.StepVoicemail || st[1].ID != "2" {
			t.Fatalf("%s: steps %+v", cause, st)
		}
	}
	d := routeOnce(t, r, dial("101"))
	if next := d.Target.Next(context.Background(), b2bua.Failure{Cause: calls.CauseCancelled, Status: 487}); next != nil {
		t.Fatalf("a cancelled call went on to %+v", next)
	}
	// Without a mailbox, no next step.
	if d := routeOnce(t, r, dial("102")); d.Target == nil || d.Target.Next != nil {
		t.Fatalf("102 has no mailbox: %+v", d)
	}
}

// TestNoPhoneGoesStraightToVoicemail: an extension with a mailbox and no
// registered phone is answered by its mailbox; without a mailbox it stays
// 480.
func TestNoPhoneGoesStraightToVoicemail(t *testing.T) {
	r := newVoicemailRouter(t, fakeMailboxes{"demo/100": true})
	in := dial("100")
	in.Caller = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "bob", Extension: "101"}
	d := routeOnce(t, r, in)
	if d.Reject != nil || d.Target == nil || d.Target.App == nil {
		t.Fatalf("decision %+v: want the mailbox", d)
	}
	if app := d.Target.App.(vmApp); app.kind != "deposit" || app.ext != "100" {
		t.Fatalf("app %+v", app)
	}
	st := r.steps.Get(in.ID)
	if len(st) != 2 || st[0].Result != string(calls.CauseFailed) || st[0].Error != "no registered phone" || st[1].Type != routing.StepVoicemail {
		t.Fatalf("steps %+v", st)
	}
	if d := routeOnce(t, r, dial("103")); d.Reject == nil || d.Reject.Status != 480 {
		t.Fatalf("103 without a phone or mailbox: %+v", d)
	}
}

// TestVoicemailDestinationAndFeatureCodes: an InboundRoute to voicemail
// deposits; *97 opens the caller's own mailbox, *98 asks; without the
// voicemail service both are refused, and *97 never reaches a carrier.
func TestVoicemailDestinationAndFeatureCodes(t *testing.T) {
	r := newVoicemailRouter(t, fakeMailboxes{"demo/100": true, "demo/101": true})
	trunkCall := &b2bua.Inbound{Caller: b2bua.Caller{Kind: b2bua.KindTrunk, Trunk: "pinned", Tenant: "demo"},
		RequestURI: sip.Uri{User: "+15550101", Host: "127.0.0.1"}, To: sip.Uri{User: "+15550101", Host: "127.0.0.1"}}
	d := routeOnce(t, r, trunkCall)
	if d.Reject != nil || d.Target.App == nil || d.Target.App.(vmApp).ext != "101" || d.Target.Meta.Direction != calls.DirectionInbound {
		t.Fatalf("voicemail route: %+v", d)
	}
	d = routeOnce(t, r, dial("*97"))
	if app, ok := d.Target.App.(vmApp); d.Reject != nil || !ok || app.kind != "check" || app.ext != "100" || app.caller.Username != "alice" {
		t.Fatalf("*97: %+v", d)
	}
	d = routeOnce(t, r, dial("*98"))
	if app, ok := d.Target.App.(vmApp); d.Reject != nil || !ok || app.kind != "check" || app.ext != "" {
		t.Fatalf("*98: %+v", d)
	}
	off := newTestRouter(t)
	off.vm = nil
	for _, user := range []string{"*97", "*98"} {
		if d := routeOnce(t, off, dial(user)); d.Reject == nil || len(d.Target.Legs) != 0 {
			t.Fatalf("%s without voicemail: %+v", user, d)
		}
	}
	if d := routeOnce(t, off, trunkCall); d.Reject == nil || d.Reject.Status != 480 {
		t.Fatalf("voicemail route without voicemail: %+v", d)
	}
}
