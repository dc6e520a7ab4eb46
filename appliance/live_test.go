package appliance

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"pbx/appliance/events"
	"pbx/appliance/guard"
	"pbx/appliance/voicemail"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
	"pbx/web/api"
)

func next(t *testing.T, s *events.Subscription) events.Event {
	t.Helper()
	select {
	case e := <-s.C:
		return e
	case <-time.After(time.Second):
		t.Fatal("nothing published")
		return events.Event{}
	}
}

// TestLivePublishesStateChanges: calls (once per tenant that sees them, as
// the API lists them), bindings, trunks and bans reach the bus as the API's
// objects.
func TestLivePublishesStateChanges(t *testing.T) {
	bus := events.New(0)
	sub := bus.Subscribe(64, nil)
	l := live{bus}

	call := b2bua.CallInfo{ID: "c1", Tenant: "acme", Extension: "200", Direction: "internal", State: b2bua.StateRinging,
		Start: time.Now(), Caller: b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Extension: "100"}}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventRinging, Call: call})
	for _, want := range []string{"acme", "demo"} {
		e := next(t, sub)
		c, ok := e.Data.(api.Call)
		if e.Type != events.CallRinging || e.Tenant != want || !ok || c.Tenant != want || c.ID != "c1" {
			t.Fatalf("ringing for %s: %+v", want, e)
		}
	}
	call.Held = true
	l.CallEvent(b2bua.Event{Kind: b2bua.EventHeld, Call: call})
	if e := next(t, sub); e.Type != events.CallHeld || !e.Data.(api.Call).Held {
		t.Fatalf("held: %+v", e)
	}
	next(t, sub)
	call.Held = false
	l.CallEvent(b2bua.Event{Kind: b2bua.EventResumed, Call: call})
	if e := next(t, sub); e.Type != events.CallHeld || e.Data.(api.Call).Held {
		t.Fatalf("resumed: %+v", e)
	}
	next(t, sub)
	call.State, call.Cause = b2bua.StateEnded, "busy"
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: call})
	if e := next(t, sub); e.Type != events.CallEnded || e.Data.(api.Call).Cause != "busy" {
		t.Fatalf("ended: %+v", e)
	}
	next(t, sub) // the other side
	l.CallEvent(b2bua.Event{Kind: b2bua.EventLegEnded, Call: call})

	l.binding(registrar.Refreshed, registrar.Binding{Tenant: "acme", Username: "alice", Contact: "sip:alice@192.0.2.1"})
	if e := next(t, sub); e.Type != events.RegistrationRefreshed || e.Tenant != "acme" || e.Data.(api.Registration).Username != "alice" {
		t.Fatalf("binding: %+v", e)
	}
	l.trunk(trunk.Status{Trunk: trunk.Trunk{Name: "carrier"}, State: trunk.StateFailed, LastError: "403"})
	if e := next(t, sub); e.Type != events.TrunkState || e.Tenant != "" || e.Data.(api.Trunk).Registration.LastError != "403" {
		t.Fatalf("trunk: %+v", e)
	}
	l.ban(guard.Ban{IP: netip.MustParseAddr("192.0.2.9"), Offences: 2})
	if e := next(t, sub); e.Type != events.BanAdded || e.Data.(api.Ban).IP != "192.0.2.9" {
		t.Fatalf("ban: %+v", e)
	}
	select {
	case e := <-sub.C:
		t.Fatalf("a leg event was published: %+v", e)
	default:
	}
}

// TestMailboxChangesReachTheBus: a change to a mailbox publishes its new
// counts for its tenant (and message waiting, off here, is skipped).
func TestMailboxChangesReachTheBus(t *testing.T) {
	st, err := voicemail.Open(voicemail.Options{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Begin(voicemail.Message{ID: string(b2bua.NewCallID(time.Now())), Tenant: "acme", Extension: "200", ReceivedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(make([]int16, 800)); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Commit(800); err != nil {
		t.Fatal(err)
	}
	a := &Appliance{bus: events.New(0), vm: st}
	sub := a.bus.Subscribe(8, nil)
	a.mailboxChanged("acme", "200")
	e := next(t, sub)
	d, _ := e.Data.(map[string]any)
	if e.Type != events.VoicemailChanged || e.Tenant != "acme" || d["extension"] != "200" || d["new"] != 1 || d["saved"] != 0 {
		t.Fatalf("event %+v", e)
	}
}
