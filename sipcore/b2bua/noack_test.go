package b2bua_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/siptest"
)

// portsFreedWithin polls until no media port is in use and no call is
// live, and returns how long that took; it fails the test past limit.
func (e *env) portsFreedWithin(t *testing.T, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if e.media.Stats().PortsInUse == 0 && e.calls.Active() == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: %d media ports and %d calls still held after %v", what, e.media.Stats().PortsInUse, e.calls.Active(), limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A caller that never ACKs the 2xx (an overloaded one) has its call, media
// ports included, released when RFC 3261 section 13.3.1.4 gives up, 64*T1
// after the 2xx, not when sipgo's INVITE transaction next notices it has
// ended; the callee gets its BYE.
func TestAnsweredCallWithoutAckReleasedAt64T1(t *testing.T) {
	e := newEnv(t, envOpts{identify: func(req *sip.Request, src netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
		return b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: tenant, Username: "alice", Extension: "101"}, true, nil
	}})
	const t1 = 20 * time.Millisecond
	b2bua.SetRetransmitTimers(e.calls, t1, 4*t1)
	bob := e.phone("udp", "bob", "bob-pw")
	p := newRawPeer(t)
	p.invite(e.udp, "102", "noack1", "", siptest.BuildSDP(4000, []uint8{0}, "sendrecv"))
	res := p.response(200)
	if res.StatusCode != 200 {
		t.Fatalf("got %s, want 200", res.StartLine())
	}
	answered := time.Now()
	in := bob.WaitIncoming(wait)
	if n := e.media.Stats().PortsInUse; n == 0 {
		t.Fatal("an answered call holds no media ports")
	}
	// No ACK is ever sent.
	took := e.portsFreedWithin(t, 64*t1+time.Second, "call without ack")
	if took < 64*t1/2 {
		t.Fatalf("call released %v after the 200, before 64*T1 (%v) gave the ACK its chance", took, 64*t1)
	}
	if ev := e.rec.ended(t); ev.Call.Reason != "no ack from caller" {
		t.Fatalf("ended: %q", ev.Call.Reason)
	}
	waitCh(t, in.Ended(), "bye to the callee")
	t.Logf("released %v after the 200 (64*T1 = %v)", time.Since(answered), 64*t1)
}

// A call the callee refuses, and one the caller cancels while it rings,
// give their media ports back at once, well within the 32 s of a
// transaction timer.
func TestRefusedOrCancelledCallHoldsNoPorts(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")

	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 486})
	if s := final(t, alice.Dial(ctxT(t), "102")); s != 486 {
		t.Fatalf("refused call: %d, want 486", s)
	}
	bob.WaitIncoming(wait) // the refused call's
	e.portsFreedWithin(t, 2*time.Second, "refused call")

	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	ctx, cancel := context.WithCancel(ctxT(t))
	call := alice.Dial(ctx, "102")
	in := bob.WaitIncoming(wait)
	if n := e.media.Stats().PortsInUse; n == 0 {
		t.Fatal("a ringing call holds no media ports (early media needs them)")
	}
	cancel()
	<-call.Done()
	waitCh(t, in.Cancelled(), "cancel at the callee")
	e.portsFreedWithin(t, 2*time.Second, "cancelled call")
}
