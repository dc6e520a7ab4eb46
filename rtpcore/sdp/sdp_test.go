package sdp

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

const linphoneOffer = "v=0\r\n" +
	"o=alice 2890844526 2890844526 IN IP4 192.0.2.10\r\n" +
	"s=Talk\r\n" +
	"c=IN IP4 192.0.2.10\r\n" +
	"t=0 0\r\n" +
	"m=audio 49170 RTP/AVP 0 8 96 101\r\n" +
	"a=rtpmap:96 opus/48000/2\r\n" +
	"a=fmtp:96 useinbandfec=1\r\n" +
	"a=rtpmap:101 telephone-event/8000\r\n" +
	"a=fmtp:101 0-15\r\n" +
	"a=ptime:20\r\n" +
	"a=rtcp:49171\r\n" +
	"a=sendrecv\r\n" +
	"m=video 49172 RTP/AVP 97\r\n" +
	"a=rtpmap:97 H264/90000\r\n"

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		addr     string
		port     int
		codecs   []string // Name/PT
		te       int      // -1 none
		dir      Direction
		ptime    int
		rtcp     int
		hold     bool
		mediaLen int
		wantErr  error
	}{
		{
			name: "linphone", body: linphoneOffer, addr: "192.0.2.10", port: 49170,
			codecs: []string{"PCMU/0", "PCMA/8", "opus/96"}, te: 101, dir: SendRecv, ptime: 20, rtcp: 49171, mediaLen: 2,
		},
		{
			name: "media level connection wins, LF line ends, static without rtpmap",
			body: "v=0\no=- 1 1 IN IP4 10.0.0.1\ns=-\nc=IN IP4 10.0.0.1\nt=0 0\nm=audio 4000 RTP/AVP 8 18\nc=IN IP4 198.51.100.7\na=sendonly\n",
			addr: "198.51.100.7", port: 4000, codecs: []string{"PCMA/8", "G729/18"}, te: -1, dir: SendOnly, hold: true, mediaLen: 1,
		},
		{
			name: "session level direction and rfc2543 hold",
			body: "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\na=inactive\r\nm=audio 4000 RTP/AVP 0 110\r\na=rtpmap:110 telephone-event/8000\r\n",
			addr: "0.0.0.0", port: 4000, codecs: []string{"PCMU/0"}, te: 110, dir: Inactive, hold: true, mediaLen: 1,
		},
		{
			name: "ipv6 and multicast ttl suffix dropped",
			body: "v=0\r\no=- 1 1 IN IP6 ::1\r\ns=-\r\nc=IN IP6 2001:db8::1\r\nt=0 0\r\nm=audio 5004/2 RTP/AVP 0\r\na=recvonly\r\n",
			addr: "2001:db8::1", port: 5004, codecs: []string{"PCMU/0"}, te: -1, dir: RecvOnly, mediaLen: 1,
		},
		{
			name: "disabled audio stream needs no address",
			body: "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nt=0 0\r\nm=audio 0 RTP/AVP 0\r\n",
			port: 0, codecs: []string{"PCMU/0"}, te: -1, dir: SendRecv, mediaLen: 1,
		},
		{name: "no version", body: "o=- 1 1 IN IP4 1.2.3.4\r\nm=audio 1 RTP/AVP 0\r\n", wantErr: ErrMalformed},
		{name: "no audio", body: "v=0\r\nc=IN IP4 1.2.3.4\r\nm=video 1 RTP/AVP 96\r\n", wantErr: ErrNoAudio},
		{name: "no address", body: "v=0\r\nm=audio 1000 RTP/AVP 0\r\n", wantErr: ErrMalformed},
		{name: "hostname address", body: "v=0\r\nc=IN IP4 pbx.example\r\nm=audio 1000 RTP/AVP 0\r\n", wantErr: ErrMalformed},
		{name: "ip6 under IP4", body: "v=0\r\nc=IN IP4 ::1\r\nm=audio 1000 RTP/AVP 0\r\n", wantErr: ErrMalformed},
		{name: "bad port", body: "v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 70000 RTP/AVP 0\r\n", wantErr: ErrMalformed},
		{name: "short m line", body: "v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 1000\r\n", wantErr: ErrMalformed},
		{name: "garbage line", body: "v=0\r\nhello\r\n", wantErr: ErrMalformed},
		{
			name: "malformed origin tolerated",
			body: "v=0\r\no=broken\r\nc=IN IP4 10.0.0.2\r\nm=audio 7000 RTP/AVP 8\r\n",
			addr: "10.0.0.2", port: 7000, codecs: []string{"PCMA/8"}, te: -1, dir: SendRecv, mediaLen: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse([]byte(tt.body))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tt.addr != "" && d.Addr != netip.MustParseAddr(tt.addr) {
				t.Errorf("Addr = %v, want %s", d.Addr, tt.addr)
			}
			if tt.addr == "" && d.Addr.IsValid() {
				t.Errorf("Addr = %v, want none", d.Addr)
			}
			if d.Port != tt.port {
				t.Errorf("Port = %d, want %d", d.Port, tt.port)
			}
			var got []string
			for _, c := range d.Codecs {
				got = append(got, c.Name+"/"+strconv.Itoa(int(c.PayloadType)))
			}
			if strings.Join(got, ",") != strings.Join(tt.codecs, ",") {
				t.Errorf("Codecs = %v, want %v", got, tt.codecs)
			}
			if tt.te < 0 && d.TelephoneEvent != nil {
				t.Errorf("TelephoneEvent = %v, want none", d.TelephoneEvent)
			}
			if tt.te >= 0 && (d.TelephoneEvent == nil || int(d.TelephoneEvent.PayloadType) != tt.te) {
				t.Errorf("TelephoneEvent = %v, want PT %d", d.TelephoneEvent, tt.te)
			}
			if d.Direction != tt.dir {
				t.Errorf("Direction = %q, want %q", d.Direction, tt.dir)
			}
			if d.Ptime != tt.ptime || d.RTCPPort != tt.rtcp {
				t.Errorf("Ptime, RTCPPort = %d, %d, want %d, %d", d.Ptime, d.RTCPPort, tt.ptime, tt.rtcp)
			}
			if d.Hold() != tt.hold {
				t.Errorf("Hold = %v, want %v", d.Hold(), tt.hold)
			}
			if len(d.Media) != tt.mediaLen {
				t.Errorf("len(Media) = %d, want %d", len(d.Media), tt.mediaLen)
			}
		})
	}
}

func TestParseFmtp(t *testing.T) {
	d, err := Parse([]byte(linphoneOffer))
	if err != nil {
		t.Fatal(err)
	}
	if d.TelephoneEvent.Fmtp != "0-15" {
		t.Errorf("telephone-event fmtp = %q", d.TelephoneEvent.Fmtp)
	}
	if d.Codecs[2].Fmtp != "useinbandfec=1" || d.Codecs[2].Channels != 2 || d.Codecs[2].ClockRate != 48000 {
		t.Errorf("opus = %+v", d.Codecs[2])
	}
	if d.Origin.SessionID != "2890844526" || d.Origin.Username != "alice" {
		t.Errorf("origin = %+v", d.Origin)
	}
}

func TestNegotiate(t *testing.T) {
	offer := func(fmts string, maps ...string) *Description {
		body := "v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 1000 RTP/AVP " + fmts + "\r\n"
		for _, m := range maps {
			body += "a=rtpmap:" + m + "\r\n"
		}
		d, err := Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := []struct {
		name   string
		offer  *Description
		codecs []Codec
		want   string
		err    error
	}{
		{"pbx order wins", offer("0 8 101", "101 telephone-event/8000"), []Codec{PCMA, PCMU}, "PCMA/8000(8),PCMU/8000(0)", nil},
		{"ulaw first config", offer("8 0"), []Codec{PCMU, PCMA}, "PCMU/8000(0),PCMA/8000(8)", nil},
		{"subset", offer("0 18"), DefaultCodecs, "PCMU/8000(0)", nil},
		{"offer payload type kept", offer("97", "97 pcma/8000"), DefaultCodecs, "pcma/8000(97)", nil},
		{"wrong rate is another codec", offer("97", "97 PCMA/16000"), DefaultCodecs, "", ErrNoCommonCodec},
		{"none", offer("18 9 101", "101 telephone-event/8000"), DefaultCodecs, "", ErrNoCommonCodec},
		{"only alaw configured", offer("0 8"), []Codec{PCMA}, "PCMA/8000(8)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Negotiate(tt.offer, tt.codecs)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			var s []string
			for _, c := range got {
				s = append(s, c.String())
			}
			if strings.Join(s, ",") != tt.want {
				t.Errorf("got %s, want %s", strings.Join(s, ","), tt.want)
			}
		})
	}
}

func TestCodecsByName(t *testing.T) {
	got, err := CodecsByName([]string{"ulaw", "ALAW", "ulaw"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != PCMU || got[1] != PCMA {
		t.Errorf("got %v", got)
	}
	def, _ := CodecsByName(nil)
	if len(def) != 2 || def[0] != PCMA {
		t.Errorf("default %v", def)
	}
	if _, err := CodecsByName([]string{"g729"}); !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("g729: err = %v", err)
	}
}

func TestOfferAndVersions(t *testing.T) {
	o := NewOrigin()
	addr := netip.MustParseAddr("203.0.113.5")
	b1 := o.Offer(addr, 20000, DefaultCodecs, "")
	d1, err := Parse(b1)
	if err != nil {
		t.Fatalf("own offer does not parse: %v\n%s", err, b1)
	}
	if d1.AudioAddr() != netip.MustParseAddrPort("203.0.113.5:20000") {
		t.Errorf("audio addr %v", d1.AudioAddr())
	}
	if d1.TelephoneEvent == nil || d1.TelephoneEvent.PayloadType != 101 || d1.TelephoneEvent.Fmtp != "0-16" {
		t.Errorf("telephone-event %+v", d1.TelephoneEvent)
	}
	if d1.Ptime != 20 || d1.Direction != SendRecv || d1.RTCPPort != 0 {
		t.Errorf("ptime %d dir %s rtcp %d", d1.Ptime, d1.Direction, d1.RTCPPort)
	}
	if len(d1.Codecs) != 2 || d1.Codecs[0].PayloadType != 8 || d1.Codecs[1].PayloadType != 0 {
		t.Errorf("codecs %v", d1.Codecs)
	}
	if !strings.Contains(string(b1), "m=audio 20000 RTP/AVP 8 0 101\r\n") {
		t.Errorf("m line:\n%s", b1)
	}

	// A session refresh with identical content keeps the version.
	b2 := o.Offer(addr, 20000, DefaultCodecs, "")
	d2, _ := Parse(b2)
	if d2.Origin.Version != d1.Origin.Version || d2.Origin.SessionID != d1.Origin.SessionID {
		t.Errorf("refresh changed o=: %+v -> %+v", d1.Origin, d2.Origin)
	}
	// Hold raises it; the session id stays.
	b3 := o.Offer(addr, 20000, DefaultCodecs, SendOnly)
	d3, _ := Parse(b3)
	if d3.Origin.SessionID != d1.Origin.SessionID || d3.Origin.Version == d1.Origin.Version {
		t.Errorf("hold o=: %+v -> %+v", d1.Origin, d3.Origin)
	}
	if d3.Direction != SendOnly {
		t.Errorf("hold direction %s", d3.Direction)
	}
	if v3, v1 := mustUint(t, d3.Origin.Version), mustUint(t, d1.Origin.Version); v3 != v1+1 {
		t.Errorf("version %d after %d", v3, v1)
	}
	// RTCP port+1 when asked for.
	b4 := o.Build(Params{Addr: addr, Port: 30000, Codecs: []Codec{PCMU}, RTCP: true})
	d4, _ := Parse(b4)
	if d4.RTCPPort != 30001 {
		t.Errorf("rtcp port %d", d4.RTCPPort)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("version %q: %v", s, err)
	}
	return v
}

func TestAnswer(t *testing.T) {
	offer, err := Parse([]byte(linphoneOffer))
	if err != nil {
		t.Fatal(err)
	}
	o := NewOrigin()
	body, common, err := o.Answer(offer, netip.MustParseAddr("10.1.1.1"), 12000, DefaultCodecs, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(common) != 2 || common[0].Name != "PCMA" {
		t.Errorf("common %v", common)
	}
	d, err := Parse(body)
	if err != nil {
		t.Fatalf("answer does not parse: %v\n%s", err, body)
	}
	if d.TelephoneEvent == nil || d.TelephoneEvent.PayloadType != 101 || d.TelephoneEvent.Fmtp != "0-15" {
		t.Errorf("telephone-event kept from offer: %+v", d.TelephoneEvent)
	}
	if len(d.Media) != 2 || d.Media[1].Type != "video" || d.Media[1].Port != 0 {
		t.Errorf("video not rejected: %+v", d.Media)
	}
	if d.Port != 12000 || d.Addr != netip.MustParseAddr("10.1.1.1") {
		t.Errorf("addr %v", d.AudioAddr())
	}

	// A hold offer is answered recvonly; a peer PT for telephone-event is kept.
	hold, _ := Parse([]byte("v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 1000 RTP/AVP 0 96\r\na=rtpmap:96 telephone-event/8000\r\na=sendonly\r\n"))
	body, _, err = o.Answer(hold, netip.MustParseAddr("10.1.1.1"), 12000, DefaultCodecs, "")
	if err != nil {
		t.Fatal(err)
	}
	d, _ = Parse(body)
	if d.Direction != RecvOnly || d.TelephoneEvent == nil || d.TelephoneEvent.PayloadType != 96 {
		t.Errorf("hold answer dir %s te %+v\n%s", d.Direction, d.TelephoneEvent, body)
	}
	// No telephone-event offered: none answered.
	plain, _ := Parse([]byte("v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 1000 RTP/AVP 0\r\n"))
	body, _, _ = o.Answer(plain, netip.MustParseAddr("10.1.1.1"), 12000, DefaultCodecs, Inactive)
	d, _ = Parse(body)
	if d.TelephoneEvent != nil || d.Direction != Inactive {
		t.Errorf("plain answer te %+v dir %s", d.TelephoneEvent, d.Direction)
	}
	// No common codec.
	g729, _ := Parse([]byte("v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 1000 RTP/AVP 18\r\n"))
	if _, _, err := o.Answer(g729, netip.MustParseAddr("10.1.1.1"), 12000, DefaultCodecs, ""); !errors.Is(err, ErrNoCommonCodec) {
		t.Errorf("g729 answer err %v", err)
	}
}

func TestRewrite(t *testing.T) {
	offer, err := Parse([]byte(linphoneOffer))
	if err != nil {
		t.Fatal(err)
	}
	o := &Origin{}
	body := o.Rewrite(offer, netip.MustParseAddr("10.9.9.9"), 16000)
	d, err := Parse(body)
	if err != nil {
		t.Fatalf("rewrite does not parse: %v\n%s", err, body)
	}
	if d.AudioAddr() != netip.MustParseAddrPort("10.9.9.9:16000") {
		t.Errorf("addr %v", d.AudioAddr())
	}
	if len(d.Codecs) != len(offer.Codecs) || d.TelephoneEvent.PayloadType != 101 || d.Direction != SendRecv || d.Ptime != 20 {
		t.Errorf("rewrite lost content:\n%s", body)
	}
	if strings.Contains(string(body), "192.0.2.10") {
		t.Errorf("peer address leaked:\n%s", body)
	}
}

func TestDirectionAnswer(t *testing.T) {
	for in, want := range map[Direction]Direction{SendRecv: SendRecv, SendOnly: RecvOnly, RecvOnly: SendOnly, Inactive: Inactive, "": SendRecv} {
		if got := in.Answer(); got != want {
			t.Errorf("%q.Answer() = %q, want %q", in, got, want)
		}
	}
}
