package sipcore

import (
	"log/slog"
	"net"
	"testing"
)

func TestRedactQuoted(t *testing.T) {
	for in, want := range map[string]string{
		"transmission beginning 'INVITE x' is not a SIP message": "transmission beginning <8 bytes> is not a SIP message",
		`field name with no value in header: "CSeq"`:             "field name with no value in header: <4 bytes>",
		"no quotes here":            "no quotes here",
		"unclosed 'secret and more": "unclosed <15 bytes>",
		`mixed "a'b" then 'c'`:      "mixed <3 bytes> then <1 bytes>",
	} {
		if got := redactQuoted(in); got != want {
			t.Errorf("redactQuoted(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	if got := printable("ok text"); got != "ok text" {
		t.Errorf("clean string changed: %q", got)
	}
	if got := printable("a\x00b\xffc"); got != "a.b.c" {
		t.Errorf("control bytes: %q", got)
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	if got := printable(string(long)); len(got) > maxLoggedValue+20 || got[len(got)-len("(300 bytes)"):] != "(300 bytes)" {
		t.Errorf("long string: %q", got)
	}
}

func TestMergeAttrsLastWins(t *testing.T) {
	got := mergeAttrs([]slog.Attr{slog.String("component", "sip"), slog.String("caller", "TransportLayer")},
		[]slog.Attr{slog.String("caller", "Transport<UDP>")})
	if len(got) != 2 || got[1].Value.String() != "Transport<UDP>" {
		t.Errorf("merge: %v", got)
	}
}

func TestSourceRingFindsTheLatestMatch(t *testing.T) {
	var r sourceRing
	a := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5060}
	b := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 5060}
	r.note(a, []byte("same payload"))
	r.note(b, []byte("other payload"))
	if got := r.lookup("same payload"); got != a.String() {
		t.Errorf("lookup = %q, want %s", got, a)
	}
	r.note(b, []byte("same payload"))
	if got := r.lookup("same payload"); got != b.String() {
		t.Errorf("lookup after a newer read = %q, want %s", got, b)
	}
	if got := r.lookup("never seen"); got != "" {
		t.Errorf("unknown payload attributed to %q", got)
	}
	for range 200 {
		r.note(a, []byte("filler"))
	}
	if got := r.lookup("other payload"); got != "" {
		t.Errorf("a read pushed out of the ring is still attributed: %q", got)
	}
	var nilRing *sourceRing
	if nilRing.lookup("x") != "" {
		t.Error("nil ring")
	}
}
