package sipcore

import (
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"
)

func parseKeyRequest(t testing.TB, via, cseq string) *sip.Request {
	t.Helper()
	text := "REGISTER sip:example.com SIP/2.0\r\n" +
		"Via: " + via + "\r\n" +
		"From: <sip:a@example.com>;tag=1\r\nTo: <sip:a@example.com>\r\n" +
		"Call-ID: k@h\r\nCSeq: " + cseq + "\r\nContent-Length: 0\r\n\r\n"
	msg, err := sip.NewParser().ParseSIP([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return msg.(*sip.Request)
}

// TestRegisterKeyAsSipgo: registerKey is sipgo's server transaction key,
// with and without a Via port, for other methods and for a branch without
// the RFC 3261 cookie (sipgo's own key then).
func TestRegisterKeyAsSipgo(t *testing.T) {
	for _, c := range []struct{ via, cseq string }{
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK-abc;rport", "1 REGISTER"},
		{"SIP/2.0/UDP host.example;branch=z9hG4bK-abc", "2 REGISTER"},
		{"SIP/2.0/TCP host.example;branch=z9hG4bKx", "2 OPTIONS"},
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK-abc", "3 ACK"},
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=old-style", "4 REGISTER"},
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK", "5 REGISTER"},
	} {
		req := parseKeyRequest(t, c.via, c.cseq)
		got, err := registerKey(req)
		want, werr := sip.ServerTxKeyMake(req)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("%s / %s: key %q, %v; sipgo %q, %v", c.via, c.cseq, got, err, want, werr)
		}
		if !strings.Contains(got, "__") {
			t.Errorf("%s: key %q has no separator", c.via, got)
		}
	}
}

// BenchmarkRegisterKey: the retransmission key of a REGISTER, one
// allocation (sipgo's ServerTxKeyMake grows a builder several times).
func BenchmarkRegisterKey(b *testing.B) {
	req := parseKeyRequest(b, "SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK-abcdef0123456789;rport", "1 REGISTER")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := registerKey(req); err != nil {
			b.Fatal(err)
		}
	}
}
