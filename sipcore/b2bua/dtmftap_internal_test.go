package b2bua

import (
	"encoding/binary"
	"testing"
	"time"

	"pbx/rtpcore"
)

// rtpPacket is a parsed RTP packet of payload type pt carrying payload.
func rtpPacket(t testing.TB, pt uint8, ssrc, ts uint32, payload []byte) *rtpcore.Packet {
	t.Helper()
	raw := make([]byte, rtpcore.HeaderLen, rtpcore.HeaderLen+len(payload))
	raw[0], raw[1] = 0x80, pt
	binary.BigEndian.PutUint32(raw[4:], ts)
	binary.BigEndian.PutUint32(raw[8:], ssrc)
	raw = append(raw, payload...)
	h, err := rtpcore.ParseHeader(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &rtpcore.Packet{Header: h, Raw: raw, At: time.Unix(1, 0)}
}

// TestDTMFTapDigits: the tap reports one digit per event on the
// telephone-event payload type it is told, follows a change of that type,
// ignores audio and reports nothing while no type is negotiated.
func TestDTMFTapDigits(t *testing.T) {
	pt := 101
	var got []rune
	tap := dtmfTap(func() int { return pt }, func(d rune, _ time.Time) { got = append(got, d) })
	digit5 := []byte{5, 0x80 | 10, 0x01, 0x40}
	digit7 := []byte{7, 10, 0x00, 0xa0}
	tap(rtpPacket(t, 8, 1, 160, make([]byte, 160)))
	tap(rtpPacket(t, 101, 1, 320, digit5))
	tap(rtpPacket(t, 101, 1, 320, digit5)) // the event's repeated end packet
	tap(rtpPacket(t, 96, 1, 480, digit7))  // not the negotiated type
	pt = 96
	tap(rtpPacket(t, 96, 1, 480, digit7))
	pt = -1
	tap(rtpPacket(t, 96, 1, 640, digit5))
	if string(got) != "57" {
		t.Fatalf("digits %q, want \"57\"", string(got))
	}
}

// BenchmarkDTMFTapAudio: the DTMF tap of 2,000 legs (1,000 calls) fed an
// audio packet each in turn, every detector on a page of its own as in a
// process holding calls: nearly every packet a held call relays is audio,
// and the tap must not touch the detector (a cache miss) or allocate for
// it.
func BenchmarkDTMFTapAudio(b *testing.B) {
	const legs = 2000
	taps := make([]rtpcore.TapFunc, legs)
	pads := make([][]byte, legs)
	pt := func() int { return 101 }
	for i := range taps {
		taps[i] = dtmfTap(pt, func(rune, time.Time) { b.Fatal("digit from audio") })
		pads[i] = make([]byte, 4096)
	}
	p := rtpPacket(b, 8, 1, 160, make([]byte, 160))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		taps[i%legs](p)
	}
}
