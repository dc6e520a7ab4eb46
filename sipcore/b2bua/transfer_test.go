package b2bua_test

import (
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/siptest"
)

// notifies reads NOTIFY sipfrag status lines until one is final (>= 200)
// and returns them.
func notifies(t *testing.T, c *siptest.Call) []string {
	t.Helper()
	var got []string
	for {
		select {
		case body := <-c.Notifies():
			line, _, _ := strings.Cut(body, "\r\n")
			got = append(got, line)
			if !strings.HasPrefix(line, "SIP/2.0 1") {
				return got
			}
		case <-time.After(wait):
			t.Fatalf("no final NOTIFY; got %q", got)
		}
	}
}

// refer sends a REFER on c and wants 202.
func refer(t *testing.T, c *siptest.Call, to string) {
	t.Helper()
	res, err := c.Refer(ctxT(t), to)
	if err != nil {
		t.Fatalf("refer: %v", err)
	}
	if res.StatusCode != sip.StatusAccepted {
		t.Fatalf("refer answered %d, want 202", res.StatusCode)
	}
}

// transferEvent waits for the call's transfer event.
func (r *recorder) transferEvent(t *testing.T) *b2bua.Transfer {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, e := range r.events {
			if e.Kind == b2bua.EventTransfer {
				r.mu.Unlock()
				return e.Transfer
			}
		}
		r.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no transfer event; got %v", r.kinds())
	return nil
}

// TestBlindTransferByCallee: bob answers alice and transfers her to carol
// (REFER from the callee): 202, NOTIFY 100 then 200, alice and carol hear
// each other, bob gets BYE from the PBX, and the call ends when alice hangs
// up, with carol's leg on the record.
func TestBlindTransferByCallee(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	call, in := answered(t, alice, bob, "102")

	refer(t, in, "sip:103@"+domain)
	toCarol := carol.WaitIncoming(wait)
	if toCarol == nil {
		t.Fatal("carol got no call")
	}
	waitCh(t, toCarol.Answered(), "carol answered")
	// 180 Ringing comes between when the PBX saw carol ring before her
	// answer (her 180 and 200 may cross).
	if got := notifies(t, in); got[0] != "SIP/2.0 100 Trying" || got[len(got)-1] != "SIP/2.0 200 OK" ||
		(len(got) == 3 && got[1] != "SIP/2.0 180 Ringing") || len(got) > 3 {
		t.Fatalf("notifies %q, want 100 Trying, (180 Ringing), 200 OK", got)
	}
	if f := toCarol.Invite.From(); f.Address.User != "102" {
		t.Fatalf("carol sees the call from %q, want the transferor 102", f.Address.User)
	}
	exchange(t, call.Media(), toCarol.Media(), 20, "a2c")
	exchange(t, toCarol.Media(), call.Media(), 20, "c2a")
	waitCh(t, in.Ended(), "bye to the transferor")
	if !in.RemoteHangup() {
		t.Fatal("the transferor hung up by itself; want the PBX's BYE")
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, toCarol.Ended(), "bye to carol")

	ev := e.rec.ended(t)
	tr := e.rec.transferEvent(t)
	if tr.Kind != b2bua.TransferBlind || tr.By != "102" || tr.To != "103" || tr.Result != calls.CauseAnswered {
		t.Fatalf("transfer %+v", tr)
	}
	if n := len(ev.Call.Legs); n != 2 || ev.Call.Legs[1].Target != "103" || !ev.Call.Legs[1].Won || ev.Call.Legs[1].End.IsZero() {
		t.Fatalf("legs %+v, want bob's and carol's (won, ended)", ev.Call.Legs)
	}
	if b := ev.Call.Legs[0]; b.End.IsZero() || !b.End.Before(ev.Call.Legs[1].End) {
		t.Fatalf("bob's leg ends at %v, want when he was released, before carol's %v", b.End, ev.Call.Legs[1].End)
	}
	if ev.Call.AnsweredBy != "103" || ev.Call.Cause != calls.CauseAnswered {
		t.Fatalf("answered by %q cause %q", ev.Call.AnsweredBy, ev.Call.Cause)
	}
}

// TestBlindTransferByCaller: alice (the caller) transfers bob to carol and
// hangs up after the final NOTIFY, as phones do; bob and carol talk; the
// call ends when carol hangs up (bob gets BYE).
func TestBlindTransferByCaller(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("tcp", "carol", "carol-pw")
	call, in := answered(t, alice, bob, "102")

	refer(t, call, "sip:103@"+domain)
	toCarol := carol.WaitIncoming(wait)
	if toCarol == nil {
		t.Fatal("carol got no call")
	}
	waitCh(t, toCarol.Answered(), "carol answered")
	if got := notifies(t, call); got[len(got)-1] != "SIP/2.0 200 OK" {
		t.Fatalf("notifies %q", got)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	exchange(t, in.Media(), toCarol.Media(), 20, "b2c")
	exchange(t, toCarol.Media(), in.Media(), 20, "c2b")
	select {
	case <-in.Ended():
		t.Fatal("bob was hung up with the transferor")
	default:
	}
	if err := toCarol.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bye to bob")
	ev := e.rec.ended(t)
	if tr := e.rec.transferEvent(t); tr.By != "101" || tr.To != "103" {
		t.Fatalf("transfer %+v", tr)
	}
	if ev.Call.Reason != "transfer target hung up" {
		t.Fatalf("reason %q", ev.Call.Reason)
	}
}

// TestAttendedTransfer: alice calls bob, holds him, calls carol, and
// REFERs bob's call with Replaces naming her call with carol: bob and carol
// are joined in the PBX, bob is taken off hold, alice's two calls end, the
// NOTIFY says 200.
func TestAttendedTransfer(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	call1, toBob := answered(t, alice, bob, "102")
	if res, _, err := call1.ReInvite(ctxT(t), "sendonly"); err != nil || res.StatusCode != 200 {
		t.Fatalf("hold: %v %v", res, err)
	}
	if s := <-toBob.ReInvites(); s.Direction != "sendonly" {
		t.Fatalf("bob held with %q", s.Direction)
	}
	call2, toCarol := answered(t, alice, carol, "103")

	refer(t, call1, call2.ReplacesURI("sip:103@"+domain))
	if got := notifies(t, call1); got[len(got)-1] != "SIP/2.0 200 OK" {
		t.Fatalf("notifies %q", got)
	}
	waitCh(t, call2.Ended(), "bye to alice's second call")
	waitCh(t, call1.Ended(), "bye to alice's first call")
	select {
	case s := <-toBob.ReInvites():
		if s.Direction != "sendrecv" && s.Direction != "" {
			t.Fatalf("bob resumed with %q", s.Direction)
		}
	case <-time.After(wait):
		t.Fatal("bob was not taken off hold")
	}
	// Once bob's resume is answered the joined call is no longer held.
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		live := e.calls.Calls()
		if len(live) == 1 && !live[0].Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live calls %+v, want the joined one, not held", live)
		}
	}
	exchange(t, toBob.Media(), toCarol.Media(), 20, "b2c")
	exchange(t, toCarol.Media(), toBob.Media(), 20, "c2b")
	if err := toBob.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, toCarol.Ended(), "bye to carol")
	deadline := time.Now().Add(wait)
	for e.calls.Active() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := e.calls.Active(); n != 0 {
		t.Fatalf("%d calls still live", n)
	}
	tr := e.rec.transferEvent(t)
	if tr.Kind != b2bua.TransferAttended || tr.By != "101" || tr.To != "103" {
		t.Fatalf("transfer %+v", tr)
	}
	e.noDialogsLeft(t)
}

// TestReferSubFalse: a REFER with Refer-Sub: false (RFC 4488) gets a 202
// saying so and no NOTIFY; the transfer happens all the same.
func TestReferSubFalse(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	call, in := answered(t, alice, bob, "102")
	res, err := in.Refer(ctxT(t), "sip:103@"+domain, sip.NewHeader("Refer-Sub", "false"))
	if err != nil || res.StatusCode != sip.StatusAccepted {
		t.Fatalf("refer: %v %v", res, err)
	}
	if h := res.GetHeader("Refer-Sub"); h == nil || h.Value() != "false" {
		t.Fatalf("202 without Refer-Sub: false: %v", res)
	}
	toCarol := carol.WaitIncoming(wait)
	if toCarol == nil {
		t.Fatal("carol got no call")
	}
	waitCh(t, toCarol.Answered(), "carol answered")
	waitCh(t, in.Ended(), "bye to the transferor")
	select {
	case n := <-in.Notifies():
		t.Fatalf("NOTIFY %q despite Refer-Sub: false", n)
	default:
	}
	exchange(t, call.Media(), toCarol.Media(), 10, "a2c")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, toCarol.Ended(), "bye to carol")
	// Every call of the transfer is over: none of their dialogs is left
	// in the manager's table.
	e.noDialogsLeft(t)
}

// TestTransferToUnroutableTarget: a target the router refuses gets the
// refusal in the final NOTIFY and the original call goes on (as Asterisk
// does); a busy target likewise.
func TestTransferToUnroutableTarget(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	// Carol plays early media before refusing: alice hears it while carol
	// rings, and bob again once the transfer failed.
	carol.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 486, EarlyMedia: true, Delay: 300 * time.Millisecond})
	call, in := answered(t, alice, bob, "102")

	refer(t, in, "sip:999@"+domain)
	if got := notifies(t, in); got[len(got)-1] != "SIP/2.0 404 Not Found" {
		t.Fatalf("notifies %q, want a final 404", got)
	}
	exchange(t, call.Media(), in.Media(), 10, "a2b")

	refer(t, in, "sip:103@"+domain)
	early := carol.WaitIncoming(wait)
	if early == nil {
		t.Fatal("carol got no call")
	}
	waitCh(t, early.EarlyMedia(), "carol's early media")
	// Ringback until alice hears it (the PBX bridges on the 183).
	tick := time.NewTicker(20 * time.Millisecond)
	deadline := time.After(wait)
	for len(call.Media().Received()) == 0 {
		if _, err := early.Media().Send([]byte("ringback")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("alice heard no early media")
		}
	}
	tick.Stop()
	if got := notifies(t, in); got[len(got)-1] != "SIP/2.0 486 Busy Here" || got[1] != "SIP/2.0 180 Ringing" {
		t.Fatalf("notifies %q, want 100, 180 and a final 486", got)
	}
	exchange(t, in.Media(), call.Media(), 10, "b2a")
	exchange(t, call.Media(), in.Media(), 10, "a2b")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bye to bob")
	ev := e.rec.ended(t)
	if n := len(ev.Call.Legs); n != 2 || ev.Call.Legs[1].SIPStatus != 486 || ev.Call.Legs[1].Won {
		t.Fatalf("legs %+v, want bob's and carol's busy one", ev.Call.Legs)
	}
}

// TestReferOutsideDialog: a REFER without a dialog gets 405 with Allow, one
// naming an unknown dialog 481.
func TestReferOutsideDialog(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	ruri := sip.Uri{Scheme: "sip", User: "102", Host: e.udp.Addr().String(), Port: int(e.udp.Port())}
	for _, tag := range []string{"", "nosuchdialog"} {
		req := sip.NewRequest(sip.REFER, ruri)
		from := &sip.FromHeader{Address: sip.Uri{Scheme: "sip", User: "alice", Host: domain}}
		from.Params.Add("tag", "abc")
		to := &sip.ToHeader{Address: sip.Uri{Scheme: "sip", User: "102", Host: domain}}
		if tag != "" {
			to.Params.Add("tag", tag)
		}
		req.AppendHeader(from)
		req.AppendHeader(to)
		req.AppendHeader(sip.NewHeader("Refer-To", "<sip:103@"+domain+">"))
		res, err := alice.Send(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		want := sip.StatusMethodNotAllowed
		if tag != "" {
			want = sip.StatusCallTransactionDoesNotExists
		}
		if res.StatusCode != want {
			t.Fatalf("refer (to-tag %q) answered %d, want %d", tag, res.StatusCode, want)
		}
		if want == sip.StatusMethodNotAllowed && res.GetHeader("Allow") == nil {
			t.Fatal("405 without Allow")
		}
	}
}

// TestInviteWithReplaces: carol sends the PBX an INVITE whose Replaces
// names alice's dialog of her call with bob (RFC 3891, a phone completing a
// transfer or picking up by itself): alice gets BYE, carol and bob talk; a
// Replaces naming no dialog gets 481.
func TestInviteWithReplaces(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	call, in := answered(t, alice, bob, "102")

	bad := carol.DialWith(ctxT(t), "102", sip.NewHeader("Replaces", "nosuchcall;to-tag=a;from-tag=b"))
	if s := final(t, bad); s != sip.StatusCallTransactionDoesNotExists {
		t.Fatalf("replaces naming nothing answered %d, want 481", s)
	}
	take := carol.DialWith(ctxT(t), "102", sip.NewHeader("Require", "replaces"), sip.NewHeader("Replaces", call.Replaces()))
	if s := final(t, take); s != 200 {
		t.Fatalf("invite with replaces answered %d", s)
	}
	waitCh(t, call.Ended(), "bye to the replaced alice")
	exchange(t, take.Media(), in.Media(), 20, "c2b")
	exchange(t, in.Media(), take.Media(), 20, "b2c")
	if err := in.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, take.Ended(), "bye to carol")
	tr := e.rec.transferEvent(t)
	if tr.Kind != b2bua.TransferAttended || tr.By != "103" || tr.To != "102" {
		t.Fatalf("transfer %+v", tr)
	}
	deadline := time.Now().Add(wait)
	for e.calls.Active() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := e.calls.Active(); n != 0 {
		t.Fatalf("%d calls still live", n)
	}
}

// TestBlindTransferForks: a target with two phones rings both; the first to
// answer wins, the other is cancelled, and both legs are on the record.
func TestBlindTransferForks(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	ringer := e.phone("udp", "carol", "carol-pw")
	ringer.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	answerer := e.phone("tcp", "carol", "carol-pw")
	answerer.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, Delay: 100 * time.Millisecond})
	call, in := answered(t, alice, bob, "102")

	refer(t, in, "sip:103@"+domain)
	rung := ringer.WaitIncoming(wait)
	won := answerer.WaitIncoming(wait)
	if rung == nil || won == nil {
		t.Fatal("both of carol's phones must ring")
	}
	waitCh(t, won.Answered(), "carol's second phone answered")
	waitCh(t, rung.Cancelled(), "carol's first phone cancelled")
	if got := notifies(t, in); got[len(got)-1] != "SIP/2.0 200 OK" {
		t.Fatalf("notifies %q", got)
	}
	exchange(t, call.Media(), won.Media(), 20, "a2c")
	exchange(t, won.Media(), call.Media(), 20, "c2a")
	if err := won.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, call.Ended(), "bye to alice")
	ev := e.rec.ended(t)
	if n := len(ev.Call.Legs); n != 3 {
		t.Fatalf("legs %+v, want bob's and carol's two", ev.Call.Legs)
	}
	var won2, cancelled int
	for _, l := range ev.Call.Legs[1:] {
		if l.Won {
			won2++
		}
		if l.Cause == calls.CauseCancelled {
			cancelled++
		}
	}
	if won2 != 1 || cancelled != 1 {
		t.Fatalf("transfer legs %+v, want one won and one cancelled", ev.Call.Legs[1:])
	}
}

// TestTransfereeLeavesWhileTargetRings: while bob's transfer rings carol,
// a REFER from alice gets 491; alice hanging up cancels carol, bob's
// NOTIFY says 487 and bob gets BYE.
func TestTransfereeLeavesWhileTargetRings(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	carol.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	call, in := answered(t, alice, bob, "102")

	refer(t, in, "sip:103@"+domain)
	rung := carol.WaitIncoming(wait)
	if rung == nil {
		t.Fatal("carol got no call")
	}
	if res, err := call.Refer(ctxT(t), "sip:101@"+domain); err != nil || res.StatusCode != sip.StatusRequestPending {
		t.Fatalf("a second transfer: %v %v, want 491", res, err)
	}
	// Carol's 180 trails her INVITE: bob hears of it before alice leaves.
	var got []string
	for len(got) < 2 {
		select {
		case body := <-in.Notifies():
			line, _, _ := strings.Cut(body, "\r\n")
			got = append(got, line)
		case <-time.After(wait):
			t.Fatalf("notifies %q before the hang-up, want 100 and 180", got)
		}
	}
	if got[1] != "SIP/2.0 180 Ringing" {
		t.Fatalf("notifies %q before the hang-up, want 100 and 180", got)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, rung.Cancelled(), "carol cancelled")
	if got := notifies(t, in); len(got) != 1 || got[0] != "SIP/2.0 487 Request Terminated" {
		t.Fatalf("notifies %q after the hang-up, want a final 487", got)
	}
	waitCh(t, in.Ended(), "bye to bob")
	if ev := e.rec.ended(t); ev.Call.Reason != "transfer failed" {
		t.Fatalf("reason %q", ev.Call.Reason)
	}
}

// TestTransferKeepsSessionTimers: with the PBX refreshing every side
// (RFC 4028, 2 s intervals), bob transfers alice to carol and leaves; the
// joined call outlives several intervals (bob's timer stopped with him,
// nobody refreshes a gone phone) and carol's side is refreshed too.
func TestTransferKeepsSessionTimers(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second, sessionExpires: 2 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	uac := siptest.Behaviour{Mode: siptest.Answer, AnswerHeaders: []sip.Header{sip.NewHeader("Session-Expires", "2;refresher=uac"), sip.NewHeader("Require", "timer")}}
	bob.SetBehaviour(uac)
	carol.SetBehaviour(uac)
	call := alice.DialWith(ctxT(t), "102", sip.NewHeader("Supported", "timer"), sip.NewHeader("Session-Expires", "2;refresher=uas"))
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	waitCh(t, in.Answered(), "bob answered")

	refer(t, in, "sip:103@"+domain)
	toCarol := carol.WaitIncoming(wait)
	if toCarol == nil {
		t.Fatal("carol got no call")
	}
	waitCh(t, toCarol.Answered(), "carol answered")
	waitCh(t, in.Ended(), "bob released")
	refreshed := 0
	end := time.After(4500 * time.Millisecond)
	for done := false; !done; {
		select {
		case <-call.Ended():
			t.Fatal("alice's side ended after the transfer")
		case <-toCarol.Ended():
			t.Fatal("carol's side ended after the transfer")
		case <-toCarol.ReInvites():
			refreshed++
		case <-end:
			done = true
		}
	}
	if refreshed == 0 {
		t.Fatal("carol's side was never refreshed")
	}
	exchange(t, call.Media(), toCarol.Media(), 10, "a2c")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, toCarol.Ended(), "bye to carol")
}
