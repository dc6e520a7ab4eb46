package sdp

import (
	"net/netip"
	"testing"
)

// phoneOffer is an offer as a desk phone sends it: three codecs,
// telephone-event with its fmtp, ptime, sendrecv.
var phoneOffer = []byte("v=0\r\n" +
	"o=- 3896712345 3896712345 IN IP4 192.0.2.10\r\n" +
	"s=SIP Call\r\n" +
	"c=IN IP4 192.0.2.10\r\n" +
	"t=0 0\r\n" +
	"m=audio 40000 RTP/AVP 8 0 9 101\r\n" +
	"a=rtpmap:8 PCMA/8000\r\n" +
	"a=rtpmap:0 PCMU/8000\r\n" +
	"a=rtpmap:9 G722/8000\r\n" +
	"a=rtpmap:101 telephone-event/8000\r\n" +
	"a=fmtp:101 0-16\r\n" +
	"a=ptime:20\r\n" +
	"a=sendrecv\r\n")

// BenchmarkParse parses a phone's offer, as the PBX does for every offer
// and answer of a call; its allocations are per SDP body.
func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(phoneOffer); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseAttributesPerStream: an rtpmap or fmtp belongs to the stream it
// follows, and a repeated one for the same payload type replaces the
// earlier.
func TestParseAttributesPerStream(t *testing.T) {
	body := []byte("v=0\r\nc=IN IP4 192.0.2.1\r\n" +
		"m=video 5000 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 profile-level-id=42e01f\r\n" +
		"m=audio 4000 RTP/AVP 96 97\r\na=rtpmap:96 opus/48000/2\r\na=rtpmap:96 PCMA/8000\r\n" +
		"a=rtpmap:97 telephone-event/8000\r\na=fmtp:97 0-15\r\na=fmtp:97 0-11\r\n")
	d, err := Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Codecs) != 1 || d.Codecs[0].Name != "PCMA" || d.Codecs[0].PayloadType != 96 || d.Codecs[0].Fmtp != "" {
		t.Fatalf("audio codecs %+v, want PCMA/8000 as 96 with no fmtp (the video stream's is not the audio's)", d.Codecs)
	}
	if te := d.TelephoneEvent; te == nil || te.PayloadType != 97 || te.Fmtp != "0-11" {
		t.Fatalf("telephone-event %+v, want 97 with the last fmtp 0-11", te)
	}
	if v := d.Media[0].Codecs; len(v) != 1 || v[0].Name != "H264" || v[0].Fmtp != "profile-level-id=42e01f" {
		t.Fatalf("video codecs %+v", v)
	}
}

// BenchmarkOfferAnswer builds the PBX's offer and its answer to a phone's
// offer, as every anchored call does for each leg; the allocations are
// those of the two bodies returned.
func BenchmarkOfferAnswer(b *testing.B) {
	offer, err := Parse(phoneOffer)
	if err != nil {
		b.Fatal(err)
	}
	addr := netip.MustParseAddr("192.0.2.1")
	codecs := []Codec{{Name: "PCMA", PayloadType: 8, ClockRate: 8000}, {Name: "PCMU", PayloadType: 0, ClockRate: 8000}}
	var o Origin
	b.ReportAllocs()
	for b.Loop() {
		if body := o.Offer(addr, 40000, codecs, ""); len(body) == 0 {
			b.Fatal("empty offer")
		}
		if _, _, err := o.Answer(offer, addr, 40002, codecs, ""); err != nil {
			b.Fatal(err)
		}
	}
}
