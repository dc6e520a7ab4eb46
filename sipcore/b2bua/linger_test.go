package b2bua_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/siptest"
)

// An answered call's INVITE transactions end sipcore.CompletedLinger after
// the 2xx (Timers L and M), not 64*T1 (32 s) after it; what they did for
// the rest of 64*T1 is the call's to do. These tests run on sipgo's real
// timers (T1 500 ms), so each waits past the linger.

func trustedAlice(*sip.Request, netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
	return b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: tenant, Username: "alice", Extension: "101"}, true, nil
}

// ack sends the raw peer's ACK for res, the 200 to its INVITE of branch.
func (p *rawPeer) ack(pbx netip.AddrPort, branch string, res *sip.Response) {
	p.t.Helper()
	p.send(pbx, "ACK %s SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK%sack;rport\r\n"+
		"From: <sip:raw@%s>;tag=raw%s\r\nTo: <sip:102@%s>;tag=%s\r\n"+
		"Call-ID: %s@raw\r\nCSeq: 1 ACK\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
		res.Contact().Address.String(), p.addr(), branch, domain, branch, domain, toTag(res), branch)
}

// A caller whose ACK is late keeps getting the 2xx after the INVITE's
// transaction has ended, until its ACK confirms the call; then the call's
// server transactions are all gone within the linger of its last one.
func TestAnswerRetransmittedPastTheTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{identify: trustedAlice})
	bob := e.phone("udp", "bob", "bob-pw")
	p := newRawPeer(t)
	p.invite(e.udp, "102", "linger1", "", siptest.BuildSDP(4000, []uint8{0}, "sendrecv"))
	first := p.response(200)
	answered := time.Now()
	if first.StatusCode != 200 {
		t.Fatalf("got %s, want 200", first.StartLine())
	}
	in := bob.WaitIncoming(wait)
	// No ACK until a retransmission comes after the transaction's end
	// (sipgo's UAS core retransmits after T1, then every T2: 4.5 s, 8.5 s).
	var late *sip.Response
	for late == nil {
		r := p.until(sipcore.CompletedLinger+5*time.Second, "200 retransmitted after the linger", cseqIs(1, 200))
		if time.Since(answered) > sipcore.CompletedLinger {
			late = r
		}
	}
	if toTag(late) != toTag(first) {
		t.Fatalf("retransmission's To tag %q, first 200's %q", toTag(late), toTag(first))
	}
	p.ack(e.udp, "linger1", late)
	time.Sleep(300 * time.Millisecond)
	if n := e.calls.Active(); n != 1 {
		t.Fatalf("%d calls live after the late ACK, want 1", n)
	}
	if slices.Contains(e.rec.kinds(), b2bua.EventEnded) {
		t.Fatalf("call ended before its hang-up: %q", e.rec.ended(t).Call.Reason)
	}
	if err := in.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if ev := e.rec.ended(t); ev.Call.Reason == "no ack from caller" {
		t.Fatalf("ended: %q", ev.Call.Reason)
	}
	// The BYE's transaction is the last; a 32 s Timer L would keep the
	// INVITE's open well past this.
	deadline := time.Now().Add(sipcore.CompletedLinger + 2*time.Second)
	for e.srv.Stats().OpenTransactions > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d server transactions open %v after the call, %v after its answer",
				e.srv.Stats().OpenTransactions, sipcore.CompletedLinger+2*time.Second, time.Since(answered).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A retransmission of an answered INVITE that arrives after its
// transaction has ended (the caller heard nothing for that long) is
// absorbed by the call: no second call rings the callee.
func TestInviteRetransmittedPastTheTransactionAbsorbed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{identify: trustedAlice})
	bob := e.phone("udp", "bob", "bob-pw")
	p := newRawPeer(t)
	offer := siptest.BuildSDP(4000, []uint8{0}, "sendrecv")
	p.invite(e.udp, "102", "linger2", "", offer)
	res := p.response(200)
	if res.StatusCode != 200 {
		t.Fatalf("got %s, want 200", res.StartLine())
	}
	in := bob.WaitIncoming(wait)
	p.ack(e.udp, "linger2", res)
	time.Sleep(sipcore.CompletedLinger + time.Second)

	p.invite(e.udp, "102", "linger2", "", offer)
	select {
	case again := <-bob.Incoming():
		t.Fatalf("the retransmitted INVITE rang the callee again (call %p)", again)
	case <-time.After(time.Second):
	}
	if n := e.calls.Active(); n != 1 {
		t.Fatalf("%d calls live, want 1", n)
	}
	select {
	case <-in.Ended():
		t.Fatal("the first call ended")
	default:
	}
	if err := in.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.rec.ended(t)
}
