package sipcore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"
)

const parseRegisterText = "REGISTER sip:example.com SIP/2.0\r\n" +
	"Via: SIP/2.0/UDP 10.0.0.1:5060;rport;branch=z9hG4bK-1\r\n" +
	"v: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-0\r\n" +
	"Max-Forwards: 70\r\n" +
	"From: \"Alice A\" <sip:alice@example.com>;tag=f1\r\n" +
	"t: <sip:alice@example.com>\r\n" +
	"call-ID: c1@host\r\n" +
	"CSeq: 7 REGISTER\r\n" +
	"Contact: <sip:alice@10.0.0.1:5060;transport=udp>;expires=600;+sip.instance=\"<urn:uuid:1>\";q=0.5\r\n" +
	"Expires: 600\r\n" +
	"User-Agent: phone 1.0\r\n" +
	"Authorization: Digest username=\"alice\", realm=\"example.com\", nonce=\"n\", uri=\"sip:example.com\", response=\"r\"\r\n" +
	"X-Custom-Header-With-A-Very-Long-Name-Indeed: x\r\n" +
	"Content-Length:   0\r\n\r\n"

// TestParseRegisterAsSipgo: the REGISTER parser reads a message into the
// same headers (types, values, order) and text as sipgo's parser, and
// leaves what it does not handle to sipgo.
func TestParseRegisterAsSipgo(t *testing.T) {
	cases := []struct {
		name, text string
		fast       bool
	}{
		{"usual", parseRegisterText, true},
		{"no content-length", strings.Replace(parseRegisterText, "Content-Length:   0\r\n", "", 1), true},
		{"contact list", strings.Replace(parseRegisterText, ";q=0.5\r\n", ";q=0.5, <sip:alice@10.0.0.2>\r\n", 1), false},
		{"comma in display name", strings.Replace(parseRegisterText, "Alice A", "A, Alice", 1), false},
		{"folded", strings.Replace(parseRegisterText, "Expires: 600\r\n", "Expires:\r\n 600\r\n", 1), false},
		{"body", strings.Replace(parseRegisterText, "Content-Length:   0\r\n\r\n", "Content-Length: 2\r\n\r\nhi", 1), false},
		{"bare LF", strings.Replace(parseRegisterText, "Expires: 600\r\n", "Expires: 600\nX: y\r\n", 1), false},
		{"lower-case method", strings.Replace(parseRegisterText, "REGISTER sip:", "register sip:", 1), false},
	}
	p := sip.NewParser()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fast, ok := parseRegisterFast([]byte(c.text))
			if ok != c.fast {
				t.Fatalf("own parse %t, want %t", ok, c.fast)
			}
			got, err := parseRegister(p, []byte(c.text))
			msg, werr := p.ParseSIP([]byte(c.text))
			if (err == nil) != (werr == nil) {
				t.Fatalf("error %v, sipgo %v", err, werr)
			}
			if err != nil {
				return
			}
			want := msg.(*sip.Request)
			if ok && describe(fast) != describe(want) {
				t.Errorf("own parse:\n%s\nsipgo:\n%s", describe(fast), describe(want))
			}
			if got.String() != want.String() {
				t.Errorf("text:\n%s\nsipgo:\n%s", got.String(), want.String())
			}
			if g, w := describe(got), describe(want); g != w {
				t.Errorf("headers:\n%s\nsipgo:\n%s", g, w)
			}
		})
	}
}

// describe lists a request's start line and its headers' types, names and
// values.
func describe(req *sip.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\n", req.Method, req.Recipient.String(), req.SipVersion)
	for _, h := range req.Headers() {
		fmt.Fprintf(&b, "%T %s: %s\n", h, h.Name(), h.Value())
	}
	return b.String()
}

// TestParseRegisterMalformed: what sipgo refuses is refused.
func TestParseRegisterMalformed(t *testing.T) {
	p := sip.NewParser()
	for _, text := range []string{
		"REGISTER sip:example.com SIP/2.0\r\nVia SIP/2.0/UDP x\r\n\r\n",
		"REGISTER sip:example.com SIP/2.0\r\nCSeq: x REGISTER\r\n\r\n",
		"REGISTER SIP/2.0\r\n\r\n",
		"REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP x\r\n",
	} {
		_, err := parseRegister(p, []byte(text))
		_, werr := p.ParseSIP([]byte(text))
		if (err == nil) != (werr == nil) {
			t.Errorf("%q: error %v, sipgo %v", text, err, werr)
		}
	}
}

// BenchmarkParseRegister: a phone's REGISTER with credentials; allocs/op
// shows a regression (sipgo's ParseSIP: BenchmarkParseRegisterSipgo).
func BenchmarkParseRegister(b *testing.B) {
	p, data := sip.NewParser(), []byte(parseRegisterText)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRegister(p, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRegisterSipgo is BenchmarkParseRegister with sipgo's
// parser, for comparison.
func BenchmarkParseRegisterSipgo(b *testing.B) {
	p, data := sip.NewParser(), []byte(parseRegisterText)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.ParseSIP(data); err != nil {
			b.Fatal(err)
		}
	}
}
