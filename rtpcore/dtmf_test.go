package rtpcore

import (
	"errors"
	"testing"
)

func TestDTMFEventRoundTrip(t *testing.T) {
	tests := []DTMFEvent{
		{Event: 5, Volume: 10, Duration: 160},
		{Event: 11, End: true, Volume: 63, Duration: 65535},
		{Event: 0},
	}
	for _, ev := range tests {
		b := ev.Append(nil)
		if len(b) != 4 {
			t.Fatalf("len %d", len(b))
		}
		got, err := ParseDTMF(b)
		if err != nil || got != ev {
			t.Errorf("%+v -> %x -> %+v (%v)", ev, b, got, err)
		}
	}
	// Known bytes from RFC 4733 §2.3: event 1, E set, volume 10, duration 1000.
	got, err := ParseDTMF([]byte{0x01, 0x8A, 0x03, 0xE8})
	if err != nil || got != (DTMFEvent{Event: 1, End: true, Volume: 10, Duration: 1000}) {
		t.Errorf("known bytes: %+v %v", got, err)
	}
	// The reserved bit is ignored.
	if got, _ := ParseDTMF([]byte{2, 0x40 | 7, 0, 1}); got.Volume != 7 || got.End {
		t.Errorf("reserved bit: %+v", got)
	}
	if _, err := ParseDTMF([]byte{1, 2, 3}); !errors.Is(err, ErrBadDTMF) {
		t.Errorf("short: %v", err)
	}
}

func TestDigits(t *testing.T) {
	for i, want := range "0123456789*#ABCD" {
		got, ok := DigitOf(uint8(i))
		if !ok || got != want {
			t.Errorf("DigitOf(%d) = %q", i, got)
		}
		ev, ok := EventOf(want)
		if !ok || ev != uint8(i) {
			t.Errorf("EventOf(%q) = %d", want, ev)
		}
	}
	if ev, ok := EventOf('d'); !ok || ev != 15 {
		t.Errorf("EventOf('d') = %d %v", ev, ok)
	}
	if _, ok := DigitOf(16); ok {
		t.Error("DigitOf(16) ok")
	}
	if _, ok := EventOf('x'); ok {
		t.Error("EventOf('x') ok")
	}
}

// dtmfStream builds the packets a phone sends for digits: progress
// packets, three end packets, one event per timestamp.
func dtmfStream(t *testing.T, pt uint8, ssrc uint32, digits string, ts uint32) [][]byte {
	t.Helper()
	var out [][]byte
	seq := uint16(100)
	for _, d := range digits {
		payloads, err := DTMFPackets(d, 800, 160)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range payloads {
			pkt := AppendHeader(nil, i == 0, pt, seq, ts, ssrc)
			out = append(out, append(pkt, p...))
			seq++
		}
		// some audio in between
		out = append(out, append(AppendHeader(nil, false, PayloadPCMA, seq, ts+800, ssrc), make([]byte, 160)...))
		seq++
		ts += 1600
	}
	return out
}

func TestDTMFDetector(t *testing.T) {
	const pt = 101
	t.Run("one digit per event with repeated end packets", func(t *testing.T) {
		d := NewDTMFDetector(pt)
		var got []rune
		for _, pkt := range dtmfStream(t, pt, 7, "1*55#", 1000) {
			if r, ok := d.FeedPacket(pkt); ok {
				got = append(got, r)
			}
		}
		if string(got) != "1*55#" {
			t.Errorf("digits %q", string(got))
		}
	})
	t.Run("start packets lost", func(t *testing.T) {
		d := NewDTMFDetector(pt)
		pkts := dtmfStream(t, pt, 7, "9", 1000)
		var got []rune
		for _, pkt := range pkts[4:] { // only the 3 end packets and audio remain
			if r, ok := d.FeedPacket(pkt); ok {
				got = append(got, r)
			}
		}
		if string(got) != "9" {
			t.Errorf("digits %q", string(got))
		}
	})
	t.Run("other payload type ignored", func(t *testing.T) {
		d := NewDTMFDetector(96)
		for _, pkt := range dtmfStream(t, pt, 7, "123", 1000) {
			if r, ok := d.FeedPacket(pkt); ok {
				t.Fatalf("digit %q from another payload type", r)
			}
		}
	})
	t.Run("new ssrc same timestamp is a new event", func(t *testing.T) {
		d := NewDTMFDetector(pt)
		n := 0
		for _, ssrc := range []uint32{1, 2} {
			for _, pkt := range dtmfStream(t, pt, ssrc, "4", 1000) {
				if _, ok := d.FeedPacket(pkt); ok {
					n++
				}
			}
		}
		if n != 2 {
			t.Errorf("%d digits, want 2", n)
		}
	})
	if _, err := DTMFPackets('x', 800, 160); err == nil {
		t.Error("DTMFPackets('x') no error")
	}
}

func FuzzParseDTMF(f *testing.F) {
	f.Add([]byte{0x01, 0x8A, 0x03, 0xE8})
	f.Add([]byte{0x10, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseDTMF(b)
		if err != nil {
			if len(b) >= 4 {
				t.Fatalf("error on %d bytes: %v", len(b), err)
			}
			return
		}
		got, err := ParseDTMF(ev.Append(nil))
		if err != nil || got != ev {
			t.Fatalf("round trip %+v -> %+v", ev, got)
		}
		d := NewDTMFDetector(101)
		pkt := append(AppendHeader(nil, false, 101, 1, 1, 1), b...)
		d.FeedPacket(pkt)
		d.FeedPacket(pkt)
	})
}
