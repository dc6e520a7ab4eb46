package sipcore

import (
	"testing"

	"github.com/emiago/sipgo/sip"
)

// TestReleaseRequestDropsHeaders: a released REGISTER keeps its request
// line and routing fields, and of its eleven headers only an empty
// Content-Length, so the transaction lingering in Completed holds no more
// of it.
func TestReleaseRequestDropsHeaders(t *testing.T) {
	raw := "REGISTER sip:acme.example SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;rport;branch=z9hG4bK-rel\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@acme.example>;tag=a\r\n" +
		"To: <sip:alice@acme.example>\r\n" +
		"Call-ID: rel@test\r\n" +
		"CSeq: 1 REGISTER\r\n" +
		"Contact: <sip:alice@127.0.0.1:5070>\r\n" +
		"Expires: 600\r\n" +
		"User-Agent: test\r\n" +
		"Authorization: Digest username=\"alice\", realm=\"acme.example\", nonce=\"n\", uri=\"sip:acme.example\", response=\"r\"\r\n" +
		"Content-Length: 4\r\n\r\nbody"
	msg, err := sip.NewParser().ParseSIP([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	req := msg.(*sip.Request)
	req.SetSource("127.0.0.1:5070")
	if n := len(req.Headers()); n != 11 {
		t.Fatalf("parsed %d headers, want 11", n)
	}
	releaseRequest(req)
	hs := req.Headers()
	if len(hs) != 1 || hs[0].Name() != "Content-Length" || hs[0].Value() != "0" {
		t.Fatalf("headers after release: %v", hs)
	}
	if req.Via() != nil || req.From() != nil || req.CallID() != nil || req.GetHeader("Authorization") != nil {
		t.Fatal("a released header is still reachable")
	}
	if len(req.Body()) != 0 {
		t.Fatalf("body %q kept", req.Body())
	}
	if req.Method != sip.REGISTER || req.Recipient.Host != "acme.example" || req.Source() != "127.0.0.1:5070" {
		t.Fatalf("request line or source lost: %s %s from %s", req.Method, req.Recipient.String(), req.Source())
	}
	if !releasesRequest(sip.REGISTER) || releasesRequest(sip.INVITE) || releasesRequest(sip.SUBSCRIBE) {
		t.Fatal("only REGISTER requests are released")
	}
}

// TestHeaderLookupMatchesSipgo: Header and Headers find what sipgo's
// GetHeader and GetHeaders find, whatever the case of the name, without
// allocating for a lookup by header name.
func TestHeaderLookupMatchesSipgo(t *testing.T) {
	res := sip.NewResponse(sip.StatusOK, "OK")
	res.AppendHeader(sip.NewHeader("Expires", "60"))
	res.AppendHeader(sip.NewHeader("Require", "a"))
	res.AppendHeader(sip.NewHeader("require", "b"))
	for _, name := range []string{"Require", "REQUIRE", "Expires", "Server"} {
		if got, want := Header(res, name), res.GetHeader(name); got != want {
			t.Fatalf("Header(%q) = %v, sipgo %v", name, got, want)
		}
		if got, want := Headers(res, name), res.GetHeaders(name); len(got) != len(want) {
			t.Fatalf("Headers(%q) = %v, sipgo %v", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Header(res, "Server") }); n != 0 {
		t.Fatalf("Header allocates %.0f times", n)
	}
}
