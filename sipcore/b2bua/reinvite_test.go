package b2bua_test

import (
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/siptest"
)

// side picks which party of an answered call acts: the caller's phone or
// the callee's.
func side(fromCaller bool, call, in *siptest.Call) (actor, other *siptest.Call) {
	if fromCaller {
		return call, in
	}
	return in, call
}

func sideName(fromCaller bool) string {
	if fromCaller {
		return "caller"
	}
	return "callee"
}

// A 2xx the PBX answers a re-INVITE with is retransmitted until the ACK
// arrives (RFC 3261 section 13.3.1.4), on both sides of the call.
// RFC 3261 13.3.1.4 retransmits independently of the transport, so TCP
// phones see it too.
func TestReInvite2xxRetransmittedUntilAck(t *testing.T) {
	for _, tc := range []struct {
		tr         string
		fromCaller bool
	}{{"udp", true}, {"udp", false}, {"tcp", true}} {
		fromCaller := tc.fromCaller
		t.Run(tc.tr+"/"+sideName(fromCaller), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			b2bua.SetRetransmitTimers(e.calls, 50*time.Millisecond, 400*time.Millisecond)
			alice := e.phone(tc.tr, "alice", "alice-pw")
			bob := e.phone("udp", "bob", "bob-pw")
			call, in := answered(t, alice, bob, "102")
			actor, _ := side(fromCaller, call, in)

			ri, err := actor.StartReInvite(ctxT(t), siptest.BuildSDP(actor.Media().Port(), []uint8{0}, "sendonly"))
			if err != nil {
				t.Fatal(err)
			}
			res, err := ri.Final(ctxT(t))
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("re-INVITE: %v %v", res, err)
			}
			// The phone ignores the first 2xx: the PBX sends it again.
			for i := range 2 {
				select {
				case r := <-ri.Retransmissions():
					if r.StatusCode != 200 || r.CSeq().SeqNo != res.CSeq().SeqNo {
						t.Fatalf("retransmission %d: %s cseq %d", i, r.StartLine(), r.CSeq().SeqNo)
					}
				case <-time.After(wait):
					t.Fatalf("no retransmission %d of the 2xx", i+1)
				}
			}
			if err := ri.Ack(ctxT(t), nil); err != nil {
				t.Fatal(err)
			}
			// Drain one already in flight, then none for longer than the
			// interval reached (T2 = 400 ms).
			quiet := time.NewTimer(1500 * time.Millisecond)
			defer quiet.Stop()
			after := 0
		watch:
			for {
				select {
				case <-ri.Retransmissions():
					after++
				case <-quiet.C:
					break watch
				}
			}
			if after > 1 {
				t.Fatalf("%d retransmissions after the ACK", after)
			}
			if n := e.calls.Active(); n != 1 {
				t.Fatalf("%d live calls after the ACK", n)
			}
			if err := call.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			waitCh(t, in.Ended(), "callee BYE")
		})
	}
}

// A 2xx never ACKed makes the PBX give up after 64*T1 and end the call
// with BYE to both phones.
func TestReInvite2xxNeverAckedEndsCall(t *testing.T) {
	for _, fromCaller := range []bool{true, false} {
		t.Run(sideName(fromCaller), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			b2bua.SetRetransmitTimers(e.calls, 20*time.Millisecond, 80*time.Millisecond)
			alice := e.phone("udp", "alice", "alice-pw")
			bob := e.phone("udp", "bob", "bob-pw")
			call, in := answered(t, alice, bob, "102")
			actor, other := side(fromCaller, call, in)
			ri, err := actor.StartReInvite(ctxT(t), siptest.BuildSDP(actor.Media().Port(), []uint8{0}, "sendonly"))
			if err != nil {
				t.Fatal(err)
			}
			if res, err := ri.Final(ctxT(t)); err != nil || res.StatusCode != 200 {
				t.Fatalf("re-INVITE: %v %v", res, err)
			}
			start := time.Now()
			waitCh(t, actor.Ended(), "BYE to the phone that never ACKed")
			waitCh(t, other.Ended(), "BYE to the other phone")
			if !actor.RemoteHangup() || !other.RemoteHangup() {
				t.Fatalf("the PBX did not send BYE to both")
			}
			if d := time.Since(start); d < 64*20*time.Millisecond/2 {
				t.Fatalf("gave up after %v, before 64*T1", d)
			}
			if ev := e.rec.ended(t); ev.Call.Reason != "no ack for re-invite answer" {
				t.Fatalf("ended reason %q", ev.Call.Reason)
			}
		})
	}
}

// The ACK the PBX sends for a repeated 2xx to its own re-INVITE carries
// that re-INVITE's CSeq, toward the caller and toward the callee.
func TestRepeated2xxOfRelayedReInviteAckedWithItsCSeq(t *testing.T) {
	for _, fromCaller := range []bool{true, false} {
		t.Run(sideName(fromCaller), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			alice := e.phone("udp", "alice", "alice-pw")
			bob := e.phone("udp", "bob", "bob-pw")
			call, in := answered(t, alice, bob, "102")
			// actor holds; the PBX relays a re-INVITE to other.
			actor, other := side(fromCaller, call, in)
			drain(other.Acks())
			if res, _, err := actor.ReInvite(ctxT(t), "sendonly"); err != nil || res.StatusCode != 200 {
				t.Fatalf("hold: %v %v", res, err)
			}
			first := nextAck(t, other.Acks(), "ACK of the relayed re-INVITE")
			// A request the PBX sends on that dialog afterwards (a relayed
			// INFO) moves its CSeq on: the ACK must not take that one.
			if st, err := actor.SendInfo(ctxT(t), "text/plain", []byte("ping")); err != nil || st != 200 {
				t.Fatalf("info: %d %v", st, err)
			}
			select {
			case <-other.Infos():
			case <-time.After(wait):
				t.Fatalf("INFO not relayed")
			}
			initial := other.Invite.CSeq().SeqNo
			if other == call {
				initial = call.Invite.CSeq().SeqNo
			}
			if err := other.RepeatReInviteAnswer(); err != nil {
				t.Fatal(err)
			}
			again := nextAck(t, other.Acks(), "ACK of the repeated 2xx")
			if again.CSeq().SeqNo != first.CSeq().SeqNo || again.CSeq().MethodName != sip.ACK {
				t.Fatalf("repeated 2xx ACKed with CSeq %s, want %d ACK", again.CSeq().Value(), first.CSeq().SeqNo)
			}
			if fromCaller && again.CSeq().SeqNo == initial {
				t.Fatalf("ACK carries the initial INVITE's CSeq %d", initial)
			}
			if err := call.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func drain(ch <-chan *sip.Request) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func nextAck(t *testing.T, ch <-chan *sip.Request, what string) *sip.Request {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(wait):
		t.Fatalf("no %s", what)
		return nil
	}
}
