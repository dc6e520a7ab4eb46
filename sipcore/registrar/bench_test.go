package registrar

import (
	"fmt"
	"testing"

	"github.com/emiago/sipgo/sip"
)

// BenchmarkDigestVerify measures Auth.Check on a valid MD5 qop=auth
// credential (nonce MAC, parse, hash, replay bookkeeping); 2 allocs/op
// (10 before the nonce MAC, the Request-URI text and the expected digest
// used scratch space and the Authorization header was found without a list).
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
		reqs[i] = benchRegister(b, a, nonce, fmt.Sprintf("u%d", i%accounts), 5060+i%accounts, uint32(i+1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := r.register(reqs[i]); res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
}

// benchRegister is a signed REGISTER of user's contact at 10.0.0.1:port
// (CSeq and nc seq) for 600 s.
func benchRegister(t testing.TB, a *Auth, nonce, user string, port int, seq uint32) *sip.Request {
	req := signedRegister(t, a, nonce, user, "pw", seq)
	aor := sip.Uri{Scheme: "sip", User: user, Host: "acme.example"}
	from := &sip.FromHeader{Address: aor}
	from.Params.Add("tag", "t")
	req.AppendHeader(from)
	req.AppendHeader(&sip.ToHeader{Address: aor})
	cid := sip.CallIDHeader("reg-" + user)
	req.AppendHeader(&cid)
	req.AppendHeader(&sip.CSeqHeader{SeqNo: seq, MethodName: sip.REGISTER})
	req.AppendHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: user, Host: "10.0.0.1", Port: port}})
	req.AppendHeader(sip.NewHeader("Expires", "600"))
	req.SetSource("10.0.0.1:5060")
	return req
}

// BenchmarkCountByTenant measures the headline counters' registration
// count over 10,000 live bindings (every few seconds, and on each status
// request): it must not copy or sort them, as List does.
func BenchmarkCountByTenant(b *testing.B) {
	r := benchRegistrar(b, 10000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n := r.CountByTenant()["acme"]; n != 10000 {
			b.Fatalf("count %d", n)
		}
	}
}

// BenchmarkList measures listing and sorting 10,000 live bindings (the
// API's registration list; the NAT keepalive round lists through
// natBindings, BenchmarkNATBindings).
func BenchmarkList(b *testing.B) {
	r := benchRegistrar(b, 10000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n := len(r.List()); n != 10000 {
			b.Fatalf("listed %d", n)
		}
	}
}

// BenchmarkNATBindings measures what a NAT keepalive round lists among
// 2,000 live bindings, none behind NAT (each one's Contact is its source).
func BenchmarkNATBindings(b *testing.B) {
	r := benchRegistrar(b, 2000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n := len(r.natBindings()); n != 0 {
			b.Fatalf("%d bindings behind NAT", n)
		}
	}
}

// benchRegistrar is a registrar holding one binding for each of n accounts.
func benchRegistrar(b *testing.B, n int) *Registrar {
	a, err := NewAuth(AuthOptions{}, benchDir{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := New(Options{Auth: a}, nil)
	if err != nil {
		b.Fatal(err)
	}
	nonce := a.newNonce("acme.example")
	for i := range n {
		if res := r.register(benchRegister(b, a, nonce, fmt.Sprintf("u%d", i), 5060, uint32(i+1))); res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
	return r
}

type benchDir struct{}

func (benchDir) ServesDomain(d string) bool { return d == "acme.example" }
func (benchDir) Account(d, u string) (Account, bool) {
	return Account{Tenant: "acme", Username: u, Password: "pw", Extension: u}, d == "acme.example"
}
