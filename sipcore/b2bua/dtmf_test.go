package b2bua_test

import (
	"bytes"
	"testing"
	"time"

	"pbx/sipcore/siptest"
)

// TestDTMFPayloadTypeTranslated: the caller offers telephone-event on 96, the PBX
// offers 101 to the callee; RFC 4733 events cross the relay on each side's own
// payload type, with the event payload untouched.
func TestDTMFPayloadTypeTranslated(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	alice.SetTelephoneEvent(96)
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, Delay: 200 * time.Millisecond})
	call, in := answered(t, alice, bob, "102")
	am, bm := call.Media(), in.Media()

	digit5 := []byte{5, 0x80 | 10, 0x01, 0x40} // event 5, end, volume 10, duration 320
	if _, err := bm.SendPT(101, digit5); err != nil {
		t.Fatal(err)
	}
	got, err := am.WaitReceived(ctxT(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p := got[len(got)-1]; p.PayloadType != 96 || !bytes.Equal(p.Payload, digit5) {
		t.Fatalf("caller received pt %d payload %x, want pt 96 payload %x", p.PayloadType, p.Payload, digit5)
	}

	digit9 := []byte{9, 0x80 | 10, 0x01, 0x40}
	if _, err := am.SendPT(96, digit9); err != nil {
		t.Fatal(err)
	}
	got, err = bm.WaitReceived(ctxT(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p := got[len(got)-1]; p.PayloadType != 101 || !bytes.Equal(p.Payload, digit9) {
		t.Fatalf("callee received pt %d payload %x, want pt 101 payload %x", p.PayloadType, p.Payload, digit9)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
