package b2bua

import (
	"testing"

	"github.com/emiago/sipgo/sip"
)

// TestReferToParsing: the Refer-To URI is found in a name-addr with a
// display name and parameters, or a bare URI; an embedded Replaces (RFC
// 3891, escaped as a URI header) is unescaped.
func TestReferToParsing(t *testing.T) {
	for in, want := range map[string]string{
		`"Carol" <sip:103@acme.example>;foo=bar`:                            "sip:103@acme.example",
		`<sip:103@acme.example?Replaces=a%40b%3Bto-tag%3D1%3Bfrom-tag%3D2>`: "sip:103@acme.example?Replaces=a%40b%3Bto-tag%3D1%3Bfrom-tag%3D2",
		`sip:103@acme.example;x=y`:                                          "sip:103@acme.example",
	} {
		if got := referURI(in); got != want {
			t.Errorf("referURI(%q) = %q, want %q", in, got, want)
		}
	}
	var u sip.Uri
	if err := sip.ParseUri(referURI(`<sip:103@acme.example?Replaces=a%40b%3Bto-tag%3D1%3Bfrom-tag%3D2>`), &u); err != nil {
		t.Fatal(err)
	}
	if got := replacesOf(u); got != "a@b;to-tag=1;from-tag=2" {
		t.Errorf("replaces %q", got)
	}
	if got := replacesOf(sip.Uri{User: "103", Host: "acme.example"}); got != "" {
		t.Errorf("no replaces: %q", got)
	}
}
