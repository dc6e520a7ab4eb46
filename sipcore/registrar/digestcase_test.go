package registrar

import (
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"
)

// TestCheckResponseHexAnyCase: the digest response is accepted in upper
// case hex as in lower case (RFC 2617 compares the hex case-insensitively
// in practice; phones send either), and one changed digit is refused.
func TestCheckResponseHexAnyCase(t *testing.T) {
	a, err := NewAuth(AuthOptions{}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	nonce := a.newNonce("acme.example")
	for i, c := range []struct {
		edit func(resp string) string
		want Outcome
	}{
		{func(r string) string { return r }, Authorized},
		{strings.ToUpper, Authorized},
		{func(r string) string { return flipDigit(r) }, Rejected},
		{func(r string) string { return r[:len(r)-1] }, Rejected},
	} {
		req := signedRegister(t, a, nonce, "alice", "pw", uint32(i+1))
		h := req.GetHeader("Authorization")
		v := h.Value()
		_, rest, _ := strings.Cut(v, `response="`)
		resp, _, _ := strings.Cut(rest, `"`)
		req.RemoveHeader("Authorization")
		req.AppendHeader(sip.NewHeader("Authorization", strings.Replace(v, resp, c.edit(resp), 1)))
		if got := a.Check(req, false, "acme.example").Outcome; got != c.want {
			t.Errorf("case %d: outcome %v, want %v", i, got, c.want)
		}
	}
}

func flipDigit(s string) string {
	b := []byte(s)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}
