package rtpcore

import (
	"bytes"
	"errors"
	"testing"
)

func TestG711KnownValues(t *testing.T) {
	tests := []struct {
		name string
		got  int
		want int
	}{
		{"ulaw encode 0", int(UlawEncode(0)), 0xFF},
		{"ulaw encode max", int(UlawEncode(32767)), 0x80},
		{"ulaw encode min", int(UlawEncode(-32768)), 0x00},
		{"ulaw decode 0xFF", int(UlawDecode(0xFF)), 0},
		{"ulaw decode 0x7F", int(UlawDecode(0x7F)), 0},
		{"ulaw decode 0x80", int(UlawDecode(0x80)), 32124},
		{"ulaw decode 0x00", int(UlawDecode(0x00)), -32124},
		{"ulaw decode 0xFE", int(UlawDecode(0xFE)), 8},
		{"alaw encode 0", int(AlawEncode(0)), 0xD5},
		{"alaw encode -1", int(AlawEncode(-1)), 0x55},
		{"alaw encode max", int(AlawEncode(32767)), 0xAA},
		{"alaw encode min", int(AlawEncode(-32768)), 0x2A},
		{"alaw decode 0xD5", int(AlawDecode(0xD5)), 8},
		{"alaw decode 0x55", int(AlawDecode(0x55)), -8},
		{"alaw decode 0xAA", int(AlawDecode(0xAA)), 32256},
		{"alaw decode 0x2A", int(AlawDecode(0x2A)), -32256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %#x (%d), want %#x (%d)", tt.got, tt.got, tt.want, tt.want)
			}
		})
	}
}

func TestG711RoundTrip(t *testing.T) {
	for b := 0; b < 256; b++ {
		if got := AlawEncode(AlawDecode(byte(b))); got != byte(b) {
			t.Errorf("alaw %#x -> %d -> %#x", b, AlawDecode(byte(b)), got)
		}
		// µ-law has two zeros (0x7F and 0xFF); zero encodes as 0xFF.
		if b == 0x7F {
			continue
		}
		if got := UlawEncode(UlawDecode(byte(b))); got != byte(b) {
			t.Errorf("ulaw %#x -> %d -> %#x", b, UlawDecode(byte(b)), got)
		}
	}
}

func TestG711QuantisationError(t *testing.T) {
	abs := func(x int) int {
		if x < 0 {
			return -x
		}
		return x
	}
	for x := -32768; x <= 32767; x++ {
		s := int16(x)
		bound := max(16, abs(x)/16)
		if e := abs(int(AlawDecode(AlawEncode(s))) - x); e > bound {
			t.Fatalf("alaw error %d at %d exceeds %d", e, x, bound)
		}
		if e := abs(int(UlawDecode(UlawEncode(s))) - x); e > bound {
			t.Fatalf("ulaw error %d at %d exceeds %d", e, x, bound)
		}
	}
	// Decoded values are monotonic in the magnitude bits.
	for i := 0; i < 127; i++ {
		if UlawDecode(byte(0x80|(127-i))) >= UlawDecode(byte(0x80|(126-i))) {
			t.Fatalf("ulaw not monotonic at %d", i)
		}
	}
}

func TestG711Slices(t *testing.T) {
	pcm := []int16{0, 1000, -1000, 32767, -32768}
	for _, pt := range []uint8{PayloadPCMA, PayloadPCMU} {
		enc, ok := Encode(pt, nil, pcm)
		if !ok || len(enc) != len(pcm) {
			t.Fatalf("pt %d encode %v %v", pt, enc, ok)
		}
		if enc[0] != Silence(pt) {
			t.Errorf("pt %d silence %#x vs %#x", pt, enc[0], Silence(pt))
		}
		dec, ok := Decode(pt, nil, enc)
		if !ok || len(dec) != len(pcm) {
			t.Fatalf("pt %d decode", pt)
		}
		if dec[1] < 900 || dec[1] > 1100 || dec[2] > -900 || dec[2] < -1100 {
			t.Errorf("pt %d decoded %v", pt, dec)
		}
	}
	if _, ok := Encode(18, nil, pcm); ok {
		t.Error("G.729 encode reported ok")
	}
}

func TestRTPHeader(t *testing.T) {
	pkt := AppendHeader(nil, true, 8, 65535, 0xDEADBEEF, 0x01020304)
	pkt = append(pkt, 1, 2, 3)
	h, err := ParseHeader(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Marker || h.PayloadType != 8 || h.Sequence != 65535 || h.Timestamp != 0xDEADBEEF || h.SSRC != 0x01020304 {
		t.Errorf("header %+v", h)
	}
	if !bytes.Equal(h.Payload(pkt), []byte{1, 2, 3}) {
		t.Errorf("payload %v", h.Payload(pkt))
	}

	// CSRCs, an extension and padding.
	ext := []byte{0x80 | 0x20 | 0x10 | 0x01, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1,
		9, 9, 9, 9, // CSRC
		0xBE, 0xDE, 0, 1, 7, 7, 7, 7, // extension, one word
		0xAA, 0xBB, // payload
		0, 0, 3} // 3 bytes padding
	h, err = ParseHeader(ext)
	if err != nil {
		t.Fatal(err)
	}
	if h.CSRCCount != 1 || !h.Extension || !bytes.Equal(h.Payload(ext), []byte{0xAA, 0xBB}) {
		t.Errorf("header %+v payload %x", h, h.Payload(ext))
	}

	for name, b := range map[string][]byte{
		"short":       {0x80, 0, 0},
		"version 1":   append([]byte{0x40}, make([]byte, 11)...),
		"csrc beyond": append([]byte{0x8F}, make([]byte, 11)...),
		"ext beyond":  append([]byte{0x90}, make([]byte, 13)...),
		"pad zero":    append([]byte{0xA0}, make([]byte, 12)...),
	} {
		if _, err := ParseHeader(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := ParseHeader([]byte{0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); !errors.Is(err, ErrNotRTP) {
		t.Errorf("version 1: %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(AppendHeader(nil, false, 0, 1, 2, 3))
	f.Add([]byte{0xB1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 9, 9, 9, 9, 0xBE, 0xDE, 0, 1, 7, 7, 7, 7, 0xAA, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		p := h.Payload(b) // must not panic
		if h.PayloadOffset+len(p)+h.PaddingLen != len(b) {
			t.Fatalf("offsets %d+%d+%d != %d", h.PayloadOffset, len(p), h.PaddingLen, len(b))
		}
		re := AppendHeader(nil, h.Marker, h.PayloadType, h.Sequence, h.Timestamp, h.SSRC)
		h2, err := ParseHeader(re)
		if err != nil || h2.Sequence != h.Sequence || h2.Timestamp != h.Timestamp || h2.SSRC != h.SSRC || h2.PayloadType != h.PayloadType || h2.Marker != h.Marker {
			t.Fatalf("re-encoded header %+v -> %+v (%v)", h, h2, err)
		}
	})
}
