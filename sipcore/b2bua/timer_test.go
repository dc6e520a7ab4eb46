package b2bua_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/siptest"
)

func hdr(name, value string) sip.Header { return sip.NewHeader(name, value) }

func headerValue(m interface{ GetHeader(string) sip.Header }, name string) string {
	if h := m.GetHeader(name); h != nil {
		return h.Value()
	}
	return ""
}

// TestSessionIntervalTooSmall: an INVITE asking for less than the PBX's
// minimum gets 422 with Min-SE (RFC 4028 section 9); Require: timer does not
// get 420.
func TestSessionIntervalTooSmall(t *testing.T) {
	e := newEnv(t, envOpts{minSE: 2 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	e.phone("udp", "bob", "bob-pw")
	call := alice.DialWith(ctxT(t), "102", hdr("Supported", "timer"), hdr("Require", "timer"), hdr("Session-Expires", "1;refresher=uac"))
	if s := final(t, call); s != 422 {
		t.Fatalf("final %d, want 422", s)
	}
	_, err := call.Final()
	var dr *sipgo.ErrDialogResponse
	if !errors.As(err, &dr) {
		t.Fatalf("final error %v, want the 422", err)
	}
	if got := headerValue(dr.Res, "Min-SE"); got != "2" {
		t.Fatalf("422 Min-SE %q, want 2", got)
	}
}

// TestSessionTimerExpiresWithoutRefresh: the caller asks to refresh itself
// (refresher=uac) with a 3 s interval and never does: the 2xx confirms the
// timer and the PBX sends BYE to both sides once the interval less
// min(32 s, interval/3) passed, recording why.
func TestSessionTimerExpiresWithoutRefresh(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	start := time.Now()
	call := alice.DialWith(ctxT(t), "102", hdr("Supported", "timer"), hdr("Session-Expires", "3;refresher=uac"), hdr("Min-SE", "1"))
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	res := call.Response()
	if got := headerValue(res, "Session-Expires"); got != "3;refresher=uac" {
		t.Fatalf("2xx Session-Expires %q, want 3;refresher=uac", got)
	}
	if got := headerValue(res, "Require"); got != "timer" {
		t.Fatalf("2xx Require %q, want timer", got)
	}
	if got := headerValue(in.Invite, "Session-Expires"); got == "" || !strings.Contains(headerValue(in.Invite, "Supported"), "timer") {
		t.Fatalf("callee INVITE Session-Expires %q Supported %q", got, headerValue(in.Invite, "Supported"))
	}
	waitCh(t, call.Ended(), "caller BYE")
	waitCh(t, in.Ended(), "callee BYE")
	took := time.Since(start)
	if !call.RemoteHangup() || !in.RemoteHangup() {
		t.Fatalf("remote hangup caller %v callee %v, want both from the PBX", call.RemoteHangup(), in.RemoteHangup())
	}
	// 3 s less min(32 s, 1 s) after the answer.
	if took < 1900*time.Millisecond || took > 3500*time.Millisecond {
		t.Fatalf("call ended after %s, want about 2 s", took)
	}
	ev := e.rec.ended(t)
	if ev.Call.Cause != calls.CauseAnswered || ev.Call.Reason != b2bua.ReasonSessionExpired {
		t.Fatalf("cause %q reason %q, want answered / %q", ev.Call.Cause, ev.Call.Reason, b2bua.ReasonSessionExpired)
	}
}

// TestSessionTimerRefreshKeepsCall: a caller that refreshes (re-INVITE)
// before each interval ends keeps its call past several intervals.
func TestSessionTimerRefreshKeepsCall(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call := alice.DialWith(ctxT(t), "102", hdr("Supported", "timer"), hdr("Session-Expires", "2;refresher=uac"))
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		select {
		case <-call.Ended():
			t.Fatal("call ended although the caller refreshed")
		case <-time.After(700 * time.Millisecond):
		}
		res, _, err := call.ReInvite(ctxT(t), "sendrecv")
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("refresh: %v %v", res, err)
		}
		if got := headerValue(res, "Session-Expires"); got != "2;refresher=uac" {
			t.Fatalf("refresh 2xx Session-Expires %q", got)
		}
	}
	select {
	case <-in.Ended():
		t.Fatal("callee side ended")
	default:
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if ev := e.rec.ended(t); ev.Call.Reason != "caller hung up" {
		t.Fatalf("reason %q", ev.Call.Reason)
	}
}

// TestSessionTimerPBXRefreshes: the caller asks the PBX to refresh
// (refresher=uas) and the callee's 2xx makes the PBX the refresher too
// (refresher=uac): the PBX re-INVITEs both sides at half the interval with
// their SDP unchanged, and the call lives on.
func TestSessionTimerPBXRefreshes(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second, sessionExpires: 2 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, AnswerHeaders: []sip.Header{hdr("Session-Expires", "2;refresher=uac"), hdr("Require", "timer")}})
	call := alice.DialWith(ctxT(t), "102", hdr("Supported", "timer"), hdr("Session-Expires", "2;refresher=uas"))
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	if got := headerValue(call.Response(), "Session-Expires"); got != "2;refresher=uas" {
		t.Fatalf("2xx Session-Expires %q", got)
	}
	answered := time.Now()
	answerSDP := call.Response().Body()
	for i := range 2 {
		select {
		case req := <-call.ReInviteRequests():
			if !bytes.Equal(req.Body(), answerSDP) {
				t.Fatalf("refresh %d to caller changed the SDP:\n%s\nwas\n%s", i, req.Body(), answerSDP)
			}
			if got := headerValue(req, "Session-Expires"); got != "2;refresher=uac" {
				t.Fatalf("refresh to caller Session-Expires %q", got)
			}
		case <-time.After(wait):
			t.Fatalf("no refresh %d to the caller", i)
		}
	}
	if took := time.Since(answered); took < 1500*time.Millisecond || took > 3*time.Second {
		t.Fatalf("two refreshes at half a 2 s interval took %s", took)
	}
	offered := in.Invite.Body()
	for i := range 2 {
		select {
		case req := <-in.ReInviteRequests():
			if !bytes.Equal(req.Body(), offered) {
				t.Fatalf("refresh %d to callee changed the SDP", i)
			}
		case <-time.After(wait):
			t.Fatalf("no refresh %d to the callee", i)
		}
	}
	select {
	case <-call.Ended():
		t.Fatal("call ended")
	default:
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestSessionTimerCalleeSilent: the callee takes the refresher role
// (refresher=uas in its 2xx) and never refreshes: the PBX ends the call.
func TestSessionTimerCalleeSilent(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second, sessionExpires: 2 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, AnswerHeaders: []sip.Header{hdr("Session-Expires", "2;refresher=uas")}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	call := alice.Dial(ctx, "102")
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	if got := headerValue(call.Response(), "Session-Expires"); got != "" {
		t.Fatalf("caller asked for no timer, 2xx has Session-Expires %q", got)
	}
	waitCh(t, in.Ended(), "callee BYE")
	waitCh(t, call.Ended(), "caller BYE")
	if ev := e.rec.ended(t); ev.Call.Reason != b2bua.ReasonSessionExpired {
		t.Fatalf("reason %q", ev.Call.Reason)
	}
}

// TestSessionIntervalRaisedAfter422: a callee refusing the PBX's session
// interval with 422 and Min-SE gets the INVITE again asking for that Min-SE
// (RFC 4028 section 7.4), once.
func TestSessionIntervalRaisedAfter422(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 422, AnswerHeaders: []sip.Header{hdr("Min-SE", "3600")}})
	call := alice.Dial(ctxT(t), "102")
	first := bob.WaitIncoming(wait)
	second := bob.WaitIncoming(wait)
	if got := headerValue(first.Invite, "Session-Expires"); got != "1800" {
		t.Fatalf("first INVITE Session-Expires %q, want 1800", got)
	}
	if got := headerValue(second.Invite, "Session-Expires"); got != "3600" {
		t.Fatalf("second INVITE Session-Expires %q, want 3600", got)
	}
	// The callee's 422 is not the caller's to answer.
	if s := final(t, call); s != 480 {
		t.Fatalf("final %d, want 480", s)
	}
	select {
	case c := <-bob.Incoming():
		t.Fatalf("a third INVITE (Session-Expires %q)", headerValue(c.Invite, "Session-Expires"))
	default:
	}
}

// TestSessionTimerRefreshByUpdate: a caller that allows UPDATE and asks the
// PBX to refresh gets UPDATEs without SDP at half the interval, not
// re-INVITEs.
func TestSessionTimerRefreshByUpdate(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call := alice.DialWith(ctxT(t), "102", hdr("Supported", "timer"), hdr("Allow", "INVITE, ACK, BYE, CANCEL, UPDATE"),
		hdr("Session-Expires", "2;refresher=uas"))
	bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	for i := range 2 {
		select {
		case req := <-call.Updates():
			if len(req.Body()) != 0 || headerValue(req, "Session-Expires") != "2;refresher=uac" {
				t.Fatalf("refresh %d: body %q Session-Expires %q", i, req.Body(), headerValue(req, "Session-Expires"))
			}
		case <-call.ReInviteRequests():
			t.Fatal("a re-INVITE refresh although the caller allows UPDATE")
		case <-time.After(wait):
			t.Fatalf("no UPDATE %d", i)
		}
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestSessionRefreshRefused: the PBX refreshes the callee, which lost the
// dialog and answers 481: the call ends with BYE to the caller (RFC 4028
// section 10), reason ReasonSessionRefreshFailed.
func TestSessionRefreshRefused(t *testing.T) {
	e := newEnv(t, envOpts{minSE: time.Second, sessionExpires: 2 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, AnswerHeaders: []sip.Header{hdr("Session-Expires", "2;refresher=uac")}})
	call, in := answered(t, alice, bob, "102")
	in.Forget()
	start := time.Now()
	waitCh(t, call.Ended(), "caller BYE")
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("call ended %s after the callee forgot it, want at the first refresh (1 s)", took)
	}
	if ev := e.rec.ended(t); ev.Call.Reason != b2bua.ReasonSessionRefreshFailed {
		t.Fatalf("reason %q", ev.Call.Reason)
	}
}

// TestSessionIntervalRaisedForCallerWithoutTimer: a Session-Expires below the
// minimum from a caller that does not support the extension (a proxy put it
// in) is not refused; the PBX refreshes at the minimum (RFC 4028 section 9).
func TestSessionIntervalRaisedForCallerWithoutTimer(t *testing.T) {
	e := newEnv(t, envOpts{minSE: 2 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	e.phone("udp", "bob", "bob-pw")
	call := alice.DialWith(ctxT(t), "102", hdr("Session-Expires", "1"))
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d, want 200", s)
	}
	res := call.Response()
	if got := headerValue(res, "Session-Expires"); got != "2;refresher=uas" {
		t.Fatalf("2xx Session-Expires %q, want 2;refresher=uas", got)
	}
	if got := headerValue(res, "Require"); got != "" {
		t.Fatalf("2xx Require %q to a caller without the extension", got)
	}
	select {
	case <-call.ReInviteRequests():
	case <-time.After(wait):
		t.Fatal("no refresh from the PBX")
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
