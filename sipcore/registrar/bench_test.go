package registrar

import (
	"fmt"
	"testing"

	"github.com/emiago/sipgo/sip"
)

// BenchmarkDigestVerify measures Auth.Check on a valid MD5 qop=auth
// credential (nonce MAC, parse, hash, replay bookkeeping).
func BenchmarkDigestVerify(b *testing.B) {
	a, err := NewAuth(AuthOptions{}, staticDir{})
	if err != nil {
		b.Fatal(err)
	}
	nonce := a.newNonce("acme.example")
	reqs := make([]*sip.Request, b.N)
	for i := range reqs {
		reqs[i] = signedRegister(b, a, nonce, "alice", "pw", uint32(i+1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := a.Check(reqs[i], false, "acme.example"); r.Outcome != Authorized {
			b.Fatalf("outcome %v", r.Outcome)
		}
	}
}

// BenchmarkRegister measures the whole in-process REGISTER path (digest
// check, binding update, 200 with the contact list) for many accounts'
// refreshes, as a registrar under load sees them.
func BenchmarkRegister(b *testing.B) {
	const accounts = 1000
	dir := benchDir{}
	a, err := NewAuth(AuthOptions{}, dir)
	if err != nil {
		b.Fatal(err)
	}
	r, err := New(Options{Auth: a}, nil)
	if err != nil {
		b.Fatal(err)
	}
	nonce := a.newNonce("acme.example")
	reqs := make([]*sip.Request, b.N)
	for i := range reqs {
		user := fmt.Sprintf("u%d", i%accounts)
		req := signedRegister(b, a, nonce, user, "pw", uint32(i+1))
		aor := sip.Uri{Scheme: "sip", User: user, Host: "acme.example"}
		from := &sip.FromHeader{Address: aor}
		from.Params.Add("tag", "t")
		req.AppendHeader(from)
		req.AppendHeader(&sip.ToHeader{Address: aor})
		cid := sip.CallIDHeader("reg-" + user)
		req.AppendHeader(&cid)
		req.AppendHeader(&sip.CSeqHeader{SeqNo: uint32(i + 1), MethodName: sip.REGISTER})
		req.AppendHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: user, Host: "10.0.0.1", Port: 5060 + i%accounts}})
		req.AppendHeader(sip.NewHeader("Expires", "600"))
		req.SetSource("10.0.0.1:5060")
		reqs[i] = req
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := r.register(reqs[i]); res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
}

type benchDir struct{}

func (benchDir) ServesDomain(d string) bool { return d == "acme.example" }
func (benchDir) Account(d, u string) (Account, bool) {
	return Account{Tenant: "acme", Username: u, Password: "pw", Extension: u}, d == "acme.example"
}
