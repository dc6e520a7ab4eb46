package sdp

import (
	"net/netip"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte(linphoneOffer))
	f.Add([]byte("v=0\nc=IN IP6 ::1\nm=audio 1/2 RTP/AVP 0 8 101\na=rtpmap:101 telephone-event/8000\na=inactive\n"))
	f.Add([]byte("v=0\r\nc=IN IP4 0.0.0.0\r\nm=audio 0 RTP/AVP 96\r\na=rtpmap:96 PCMA/8000/1\r\na=fmtp:96 x\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := Parse(body)
		if err != nil {
			return
		}
		// A rewrite of a parsed body re-parses with the same media.
		o := NewOrigin()
		out := o.Rewrite(d, netip.MustParseAddr("192.0.2.1"), 10000)
		d2, err := Parse(out)
		if err != nil {
			t.Fatalf("rewrite does not parse: %v\n%q\nfrom %q", err, out, body)
		}
		if d.Port != 0 && d2.Port != 10000 {
			t.Fatalf("port %d", d2.Port)
		}
		if d2.Direction != d.Direction {
			t.Fatalf("direction %q -> %q", d.Direction, d2.Direction)
		}
		if len(d2.Codecs) != len(d.Codecs) {
			t.Fatalf("codecs %v -> %v\n%q", d.Codecs, d2.Codecs, out)
		}
		for i := range d.Codecs {
			if !d.Codecs[i].Same(d2.Codecs[i]) || d.Codecs[i].PayloadType != d2.Codecs[i].PayloadType {
				t.Fatalf("codec %d %v -> %v\n%q", i, d.Codecs[i], d2.Codecs[i], out)
			}
		}
		if (d.TelephoneEvent == nil) != (d2.TelephoneEvent == nil) {
			t.Fatalf("telephone-event %v -> %v", d.TelephoneEvent, d2.TelephoneEvent)
		}
		if _, err := Negotiate(d, DefaultCodecs); err == nil {
			if _, _, err := o.Answer(d, netip.MustParseAddr("192.0.2.1"), 10000, DefaultCodecs, ""); err != nil {
				t.Fatalf("answer: %v", err)
			}
		}
	})
}
