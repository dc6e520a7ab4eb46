package b2bua_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/pion/rtp"

	"pbx/rtpcore"
	"pbx/sipcore/b2bua"
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

// checkEvent checks, packet by packet, one RFC 4733 event the PBX generated
// for digit event lasting dur samples at one packet per 160 samples:
// progress packets with growing duration, then three end packets, one
// timestamp and SSRC, consecutive sequence numbers, the marker on the first.
func checkEvent(t *testing.T, got []rtp.Packet, pt, event uint8, dur uint16) {
	t.Helper()
	want := int(dur/160) + 2 // progress 160..dur-160, then 3 end packets
	if len(got) != want {
		t.Fatalf("got %d packets, want %d", len(got), want)
	}
	for i, p := range got {
		ev, err := rtpcore.ParseDTMF(p.Payload)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		end := i >= len(got)-3
		wantDur := uint16(160 * (i + 1))
		if end {
			wantDur = dur
		}
		switch {
		case p.PayloadType != pt:
			t.Fatalf("packet %d pt %d, want %d", i, p.PayloadType, pt)
		case ev.Event != event || ev.End != end || ev.Duration != wantDur:
			t.Fatalf("packet %d event %+v, want event %d end %v duration %d", i, ev, event, end, wantDur)
		case p.Marker != (i == 0):
			t.Fatalf("packet %d marker %v", i, p.Marker)
		case p.Timestamp != got[0].Timestamp || p.SSRC != got[0].SSRC:
			t.Fatalf("packet %d timestamp %d ssrc %x, want those of the first (%d %x)", i, p.Timestamp, p.SSRC, got[0].Timestamp, got[0].SSRC)
		case p.SequenceNumber != got[0].SequenceNumber+uint16(i):
			t.Fatalf("packet %d seq %d, want %d", i, p.SequenceNumber, got[0].SequenceNumber+uint16(i))
		}
	}
}

// TestInfoDTMFBecomesRFC4733: DTMF in SIP INFO (application/dtmf-relay with a
// duration, application/dtmf with a bare digit) from one side reaches the
// other side, which negotiated telephone-event, as RFC 4733 events on its
// own payload type, not as INFO; the caller's digit is recorded.
func TestInfoDTMFBecomesRFC4733(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	alice.SetTelephoneEvent(96)
	call, in := answered(t, alice, bob, "102")

	if s, err := call.SendInfo(ctxT(t), "application/dtmf-relay", []byte("Signal=5\r\nDuration=160\r\n")); err != nil || s != 200 {
		t.Fatalf("info: %d %v", s, err)
	}
	got, err := in.Media().WaitReceived(ctxT(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	checkEvent(t, got, 101, 5, 1280)

	if s, err := in.SendInfo(ctxT(t), "application/dtmf", []byte("#")); err != nil || s != 200 {
		t.Fatalf("info: %d %v", s, err)
	}
	got, err = call.Media().WaitReceived(ctxT(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	checkEvent(t, got, 96, 11, 1280)
	select {
	case b := <-in.Infos():
		t.Fatalf("callee got an INFO %q besides the events", b)
	case b := <-call.Infos():
		t.Fatalf("caller got an INFO %q besides the events", b)
	default:
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ds := e.rec.ended(t).Call.Digits
	if len(ds) != 1 || ds[0].Digit != "5" || ds[0].Via != b2bua.DigitViaINFO {
		t.Fatalf("digits %+v, want the caller's 5 by INFO only", ds)
	}
}

// TestRFC4733BecomesInfo: the callee's SDP has no telephone-event, so the
// caller's RFC 4733 event reaches it as one INFO (application/dtmf-relay)
// and not as RTP; an INFO from the caller is relayed as INFO
// (application/dtmf-relay). Both digits are recorded.
func TestRFC4733BecomesInfo(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetNoTelephoneEvent(true)
	call, in := answered(t, alice, bob, "102")

	ev := func(end bool, d uint16) []byte {
		return rtpcore.DTMFEvent{Event: 7, Volume: 10, End: end, Duration: d}.Append(nil)
	}
	if err := call.Media().SendEvent(101, ev(false, 160), ev(false, 320), ev(true, 480), ev(true, 480), ev(true, 480)); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-in.Infos():
		if string(b) != "Signal=7\r\nDuration=160\r\n" {
			t.Fatalf("callee INFO %q", b)
		}
	case <-time.After(wait):
		t.Fatal("no INFO at the callee")
	}
	// Audio sent after the event arrives; the event packets did not.
	seq, err := call.Media().Send([]byte("audio-after-event"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := in.Media().WaitReceived(ctxT(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].SequenceNumber != seq {
		t.Fatalf("callee received %d packets (first pt %d), want only the audio", len(got), got[0].PayloadType)
	}
	select {
	case b := <-in.Infos():
		t.Fatalf("a second INFO %q for one event", b)
	default:
	}

	// A bare application/dtmf digit goes on as dtmf-relay.
	if s, err := call.SendInfo(ctxT(t), "application/dtmf", []byte("1")); err != nil || s != 200 {
		t.Fatalf("info: %d %v", s, err)
	}
	select {
	case b := <-in.Infos():
		if string(b) != "Signal=1\r\nDuration=160\r\n" {
			t.Fatalf("relayed INFO %q", b)
		}
	case <-time.After(wait):
		t.Fatal("INFO not relayed")
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ds := e.rec.ended(t).Call.Digits
	if len(ds) != 2 || ds[0].Digit != "7" || ds[0].Via != b2bua.DigitViaRTP || ds[1].Digit != "1" || ds[1].Via != b2bua.DigitViaINFO {
		t.Fatalf("digits %+v, want 7 (rfc4733) then 1 (info)", ds)
	}
}

func TestParseDTMFInfo(t *testing.T) {
	for _, c := range []struct {
		ct, body string
		digit    rune
		dur      time.Duration
		ok       bool
	}{
		{"application/dtmf-relay", "Signal=5\r\nDuration=160\r\n", '5', 160 * time.Millisecond, true},
		{"Application/DTMF-Relay", "signal= #\nduration= 250", '#', 250 * time.Millisecond, true},
		{"application/dtmf-relay", "Signal=*\r\n", '*', 160 * time.Millisecond, true},
		{"application/dtmf-relay", "Signal=11\r\nDuration=100\r\n", '#', 100 * time.Millisecond, true},
		{"application/dtmf-relay", "Signal=a\r\nDuration=10\r\n", 'A', 40 * time.Millisecond, true},
		{"application/dtmf-relay", "Signal=5\r\nDuration=60000\r\n", '5', 2 * time.Second, true},
		{"application/dtmf", "9", '9', 160 * time.Millisecond, true},
		{"application/dtmf", "Signal=7\r\nDuration=300", '7', 300 * time.Millisecond, true},
		{"application/dtmf-relay", "Signal=X\r\n", 0, 0, false},
		{"application/dtmf-relay", "Duration=160\r\n", 0, 0, false},
		{"text/plain", "5", 0, 0, false},
	} {
		d, dur, ok := b2bua.ParseDTMFInfo(c.ct, []byte(c.body))
		if d != c.digit || dur != c.dur || ok != c.ok {
			t.Errorf("%s %q: %q %s %v, want %q %s %v", c.ct, c.body, d, dur, ok, c.digit, c.dur, c.ok)
		}
	}
}

// TestRFC4733DigitsInOrder: digits the caller sends one after another are
// each turned into an INFO and recorded, in order, whether the goroutine
// that relays them is still on the queue or has to start again.
func TestRFC4733DigitsInOrder(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetNoTelephoneEvent(true)
	call, in := answered(t, alice, bob, "102")

	send := func(code uint8) {
		t.Helper()
		ev := func(end bool, d uint16) []byte {
			return rtpcore.DTMFEvent{Event: code, Volume: 10, End: end, Duration: d}.Append(nil)
		}
		if err := call.Media().SendEvent(101, ev(false, 160), ev(true, 320), ev(true, 320)); err != nil {
			t.Fatal(err)
		}
	}
	info := func(want string) {
		t.Helper()
		select {
		case b := <-in.Infos():
			if string(b) != "Signal="+want+"\r\nDuration=160\r\n" {
				t.Fatalf("INFO %q, want digit %s", b, want)
			}
		case <-time.After(wait):
			t.Fatalf("no INFO for digit %s", want)
		}
	}
	send(3)
	info("3") // the relaying goroutine has handled its queue by now
	send(9)
	send(5) // queued behind 9, or starting the goroutine again
	info("9")
	info("5")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ds := e.rec.ended(t).Call.Digits
	if len(ds) != 3 || ds[0].Digit != "3" || ds[1].Digit != "9" || ds[2].Digit != "5" {
		t.Fatalf("digits %+v, want 3, 9, 5", ds)
	}
}
