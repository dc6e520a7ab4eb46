package b2bua_test

import (
	"net"
	"testing"
	"time"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/siptest"
)

// A carrier playing ringback in a 180 with SDP is bridged like a 183: the
// caller gets a 180 with the PBX's SDP and the RTP before the answer.
func TestEarlyMediaIn180Bridged(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, EarlyMedia: true, EarlyStatus: 180, Delay: 2 * time.Second})
	call := alice.Dial(ctxT(t), "102")
	in := bob.WaitIncoming(wait)
	waitCh(t, in.EarlyMedia(), "callee 180 with sdp")
	waitCh(t, call.EarlyMedia(), "caller 180 with sdp")
	if s := call.EarlyStatus(); s != 180 {
		t.Fatalf("early media came in %d, want 180", s)
	}
	if r := call.Media().Remote(); r.Port() == uint16(in.Media().Port()) {
		t.Fatalf("caller's early media goes straight to the callee %s", r)
	}
	exchange(t, in.Media(), call.Media(), 10, "ring")
	select {
	case <-call.Done():
		t.Fatalf("answered before the ringback was checked")
	default:
	}
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	exchange(t, call.Media(), in.Media(), 10, "x")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bob BYE")
}

// An INVITE without SDP is accepted: the PBX offers in its 200 the codecs
// the callee accepted and takes the caller's answer from the ACK.
func TestLateOfferAnsweredInAck(t *testing.T) {
	for _, tr := range []string{"udp", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			alice := e.phone(tr, "alice", "alice-pw")
			bob := e.phone("udp", "bob", "bob-pw")
			bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, Codecs: []uint8{8}})
			call := alice.DialLateOffer(ctxT(t), "102", true)
			in := bob.WaitIncoming(wait)
			if s := final(t, call); s != 200 {
				_, err := call.Final()
				t.Fatalf("final %d: %v", s, err)
			}
			waitCh(t, in.Answered(), "bob answered")
			offer := call.OfferIn2xx()
			if offer == nil || len(offer.Codecs) != 1 || offer.Codecs[0] != 8 {
				t.Fatalf("offer in 200: %+v, want PCMA only (what bob accepted)", offer)
			}
			if offer.Addr.Port() == uint16(in.Media().Port()) {
				t.Fatalf("offer points at the callee, not the PBX")
			}
			exchange(t, call.Media(), in.Media(), 20, "a")
			exchange(t, in.Media(), call.Media(), 20, "b")
			if err := call.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			waitCh(t, in.Ended(), "bob BYE")
			if ev := e.rec.ended(t); ev.Call.Cause != calls.CauseAnswered {
				t.Fatalf("ended %s %q", ev.Call.Cause, ev.Call.Reason)
			}
			e.rec.mu.Lock()
			defer e.rec.mu.Unlock()
			for _, ev := range e.rec.events {
				if ev.Kind == b2bua.EventAnswered && ev.Media.PayloadType != 8 {
					t.Fatalf("answered event payload type %d, want 8 (PCMA, the only codec offered)", ev.Media.PayloadType)
				}
			}
		})
	}
}

// A late-offer caller whose ACK has no answer cannot have media: the PBX
// ends the call with BYE both ways.
func TestLateOfferAckWithoutAnswerEndsCall(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call := alice.DialLateOffer(ctxT(t), "102", false)
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	waitCh(t, call.Ended(), "BYE to the caller")
	waitCh(t, in.Ended(), "BYE to the callee")
	if !call.RemoteHangup() || !in.RemoteHangup() {
		t.Fatalf("the PBX did not hang up both sides")
	}
	ev := e.rec.ended(t)
	if ev.Call.Cause != calls.CauseFailed || ev.Call.Reason != "no acceptable sdp answer in ack" {
		t.Fatalf("ended %s %q", ev.Call.Cause, ev.Call.Reason)
	}
}

// A re-INVITE without SDP gets the PBX's offer in the 200 and the answer
// in the ACK moves that side's media: RTP from the other side goes where
// the answer says.
func TestReInviteWithoutSDPAnsweredInAck(t *testing.T) {
	for _, fromCaller := range []bool{true, false} {
		t.Run(sideName(fromCaller), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			alice := e.phone("udp", "alice", "alice-pw")
			bob := e.phone("udp", "bob", "bob-pw")
			call, in := answered(t, alice, bob, "102")
			actor, other := side(fromCaller, call, in)

			ri, err := actor.StartReInvite(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := ri.Final(ctxT(t))
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("re-INVITE: %v %v", res, err)
			}
			offer, err := siptest.ParseSDP(res.Body())
			if err != nil || len(offer.Codecs) == 0 {
				t.Fatalf("200 carries no offer: %v\n%s", err, res.Body())
			}
			moved, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer moved.Close()
			port := moved.LocalAddr().(*net.UDPAddr).Port
			if err := ri.Ack(ctxT(t), siptest.BuildSDP(port, offer.Codecs[:1], "sendrecv")); err != nil {
				t.Fatal(err)
			}
			// The answer is applied once the ACK is in: poll by sending
			// until a packet arrives at the new port.
			buf := make([]byte, 2048)
			deadline := time.Now().Add(wait)
			for {
				if _, err := other.Media().Send([]byte("moved-media")); err != nil {
					t.Fatal(err)
				}
				_ = moved.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if n, _, err := moved.ReadFromUDP(buf); err == nil && n > 12 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no RTP at the address the ACK's answer gave")
				}
			}
			if err := call.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
