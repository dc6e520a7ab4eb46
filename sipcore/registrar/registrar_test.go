package registrar_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/db"
	"pbx/sipcore"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

const (
	domain = "acme.example"
	tenant = "acme"
)

type env struct {
	srv *sipcore.Server
	reg *registrar.Registrar
	dir *siptest.Directory
	udp netip.AddrPort
	tcp netip.AddrPort
}

func newDir() *siptest.Directory {
	dir := siptest.NewDirectory()
	dir.AddDomain(tenant, domain)
	dir.AddAccount(domain, registrar.Account{Username: "alice", Password: "alice-secret", Extension: "101"})
	dir.AddAccount(domain, registrar.Account{Username: "bob", Password: "bob-secret", Extension: "102", MaxContacts: 2})
	return dir
}

func newEnv(t testing.TB, mod func(*registrar.Options)) *env {
	t.Helper()
	return newEnvAlgs(t, nil, mod)
}

// newEnvAlgs is newEnv with the digest algorithms offered (nil: default).
func newEnvAlgs(t testing.TB, algs []string, mod func(*registrar.Options)) *env {
	t.Helper()
	dir := newDir()
	srv, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{
		{ID: "udp", Transport: "udp", BindHost: "127.0.0.1"},
		{ID: "tcp", Transport: "tcp", BindHost: "127.0.0.1"},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := registrar.NewAuth(registrar.AuthOptions{Algorithms: algs}, dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := registrar.Options{Auth: auth, SIP: srv}
	if mod != nil {
		mod(&opts)
	}
	reg, err := registrar.New(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(sip.REGISTER, reg.HandleRegister)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	e := &env{srv: srv, reg: reg, dir: dir}
	e.udp, _ = srv.Addr("udp")
	e.tcp, _ = srv.Addr("tcp")
	return e
}

func (e *env) phone(t testing.TB, transport, user, password string) *siptest.Phone {
	pbx := e.udp
	if transport == "tcp" {
		pbx = e.tcp
	}
	return siptest.NewPhone(t, siptest.Options{Transport: transport, Username: user, Password: password, Domain: domain, PBX: pbx})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRegisterWithDigest(t *testing.T) {
	e := newEnv(t, nil)
	for _, tr := range []string{"udp", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			p := e.phone(t, tr, "alice", "alice-secret")
			res := p.MustRegister(ctxT(t), 600)
			ct := res.GetHeaders("Contact")
			if len(ct) != 1 {
				t.Fatalf("200 lists %d contacts, want 1: %s", len(ct), res)
			}
			if !strings.Contains(ct[0].Value(), "expires=600") && !strings.Contains(ct[0].Value(), "expires=599") {
				t.Fatalf("contact %q lacks expires", ct[0].Value())
			}
			if s := res.GetHeader("Server"); s == nil || s.Value() != "pbx" {
				t.Fatalf("Server header = %v", s)
			}
			if d := res.GetHeader("Date"); d == nil || !strings.HasSuffix(d.Value(), " GMT") {
				t.Fatalf("Date header = %v", d)
			}
			var found *registrar.Binding
			for _, b := range e.reg.Lookup(tenant, "101") {
				if b.Contact == p.Contact() {
					b := b
					found = &b
				}
			}
			if found == nil {
				t.Fatalf("binding for %s not found in %+v", p.Contact(), e.reg.Lookup(tenant, "101"))
			}
			if found.Transport != tr || found.Source.Addr() != p.Addr().Addr() || found.Username != "alice" || found.Tenant != tenant {
				t.Fatalf("binding = %+v", *found)
			}
			if tr == "udp" && found.Source != p.Addr() {
				t.Fatalf("udp source %s, want phone socket %s", found.Source, p.Addr())
			}
			tg, ok := found.Target(e.srv.ConnectionOpen)
			if !ok || (tr == "tcp" && !tg.ViaConnection) {
				t.Fatalf("target = %+v ok=%v", tg, ok)
			}
			// Refresh then un-register this contact.
			p.MustRegister(ctxT(t), 300)
			res = p.MustRegister(ctxT(t), 0)
			if n := len(res.GetHeaders("Contact")); n != 0 {
				t.Fatalf("after un-register 200 lists %d contacts", n)
			}
			for _, b := range e.reg.Lookup(tenant, "101") {
				if b.Contact == p.Contact() {
					t.Fatalf("binding still present after Expires: 0")
				}
			}
		})
	}
}

func TestChallengeShape(t *testing.T) {
	for _, tc := range []struct {
		algs []string
		want []string // algorithm of each WWW-Authenticate, in order
	}{
		{nil, []string{"MD5"}},
		{[]string{"md5"}, []string{"MD5"}},
		{[]string{"sha-256"}, []string{"SHA-256"}},
		{[]string{"md5", "sha-256"}, []string{"MD5", "SHA-256"}},
		{[]string{"sha-256", "md5"}, []string{"SHA-256", "MD5"}},
	} {
		t.Run(strings.Join(tc.algs, ","), func(t *testing.T) {
			e := newEnvAlgs(t, tc.algs, nil)
			p := e.phone(t, "udp", "alice", "alice-secret")
			res, err := p.Send(ctxT(t), p.RegisterRequest(600))
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 401 {
				t.Fatalf("status %d, want 401", res.StatusCode)
			}
			hs := res.GetHeaders("WWW-Authenticate")
			if len(hs) != len(tc.want) {
				t.Fatalf("%d challenges, want %d: %v", len(hs), len(tc.want), hs)
			}
			for i, alg := range tc.want {
				v := hs[i].Value()
				if !strings.Contains(v, "algorithm="+alg+",") || !strings.Contains(v, `qop="auth"`) || !strings.Contains(v, `realm="acme.example"`) {
					t.Fatalf("challenge %d is %q, want algorithm %s", i, v, alg)
				}
			}
		})
	}
}

func TestNewAuthRefusesBadAlgorithms(t *testing.T) {
	for _, algs := range [][]string{{"sha-512"}, {"md5", "MD5"}, {""}} {
		if _, err := registrar.NewAuth(registrar.AuthOptions{Algorithms: algs}, newDir()); !errors.Is(err, registrar.ErrInvalidOptions) {
			t.Errorf("algorithms %q: err %v, want ErrInvalidOptions", algs, err)
		}
	}
}

// TestOnlyOfferedAlgorithmsAccepted: a response for an algorithm the
// challenge offered passes, one for an algorithm it did not is refused.
func TestOnlyOfferedAlgorithmsAccepted(t *testing.T) {
	for _, tc := range []struct {
		algs             []string
		accept, rejected []string
	}{
		{nil, []string{registrar.AlgMD5}, []string{registrar.AlgSHA256}},
		{[]string{"sha-256"}, []string{registrar.AlgSHA256}, []string{registrar.AlgMD5}},
		{[]string{"sha-256", "md5"}, []string{registrar.AlgSHA256, registrar.AlgMD5}, nil},
	} {
		t.Run(strings.Join(tc.algs, ","), func(t *testing.T) {
			e := newEnvAlgs(t, tc.algs, nil)
			p := e.phone(t, "udp", "alice", "alice-secret")
			try := func(alg string) int {
				chal, err := p.Send(ctxT(t), p.RegisterRequest(600))
				if err != nil {
					t.Fatal(err)
				}
				r := p.RegisterRequest(600)
				r.AppendHeader(sip.NewHeader("Authorization", authorize(t, chal, r, alg, "alice", "alice-secret", 1)))
				res, err := p.Send(ctxT(t), r)
				if err != nil {
					t.Fatal(err)
				}
				return res.StatusCode
			}
			for _, alg := range tc.accept {
				if s := try(alg); s != 200 {
					t.Errorf("offered %s: %d, want 200", alg, s)
				}
			}
			for _, alg := range tc.rejected {
				if s := try(alg); s != 403 {
					t.Errorf("not offered %s: %d, want 403", alg, s)
				}
			}
		})
	}
}

var nonceRe = regexp.MustCompile(`nonce="([^"]+)"`)

// authorize builds an Authorization value with alg for the challenge of res
// that offers alg, or (to try one not offered) its first challenge.
func authorize(t *testing.T, res *sip.Response, req *sip.Request, alg, user, pass string, nc uint32) string {
	t.Helper()
	hs := res.GetHeaders("WWW-Authenticate")
	if len(hs) == 0 {
		t.Fatalf("no challenge in %s", res)
	}
	chal := hs[0].Value()
	for _, h := range hs {
		if strings.Contains(h.Value(), "algorithm="+alg+",") {
			chal = h.Value()
		}
	}
	m := nonceRe.FindStringSubmatch(chal)
	if m == nil {
		t.Fatalf("no nonce in %s", res)
	}
	uri := req.Recipient.String()
	resp, _ := registrar.DigestResponse(alg, user, domain, pass, "REGISTER", uri, m[1], "auth", nc, "c0ffee")
	return fmt.Sprintf(`Digest username="%s", realm="%s", nonce="%s", uri="%s", response="%s", algorithm=%s, cnonce="c0ffee", qop=auth, nc=%08x`,
		user, domain, m[1], uri, resp, alg, nc)
}

var normalizers = []*regexp.Regexp{
	regexp.MustCompile(`nonce="[^"]*"`),
	regexp.MustCompile(`tag=[^;>\r\n]*`),
	regexp.MustCompile(`branch=[^;\r\n]*`),
	regexp.MustCompile(`(?m)^Call-ID: .*$`),
	regexp.MustCompile(`(?m)^CSeq: .*$`),
	regexp.MustCompile(`(?m)^Date: .*$`),
}

func normalize(s string, users ...string) string {
	for _, re := range normalizers {
		s = re.ReplaceAllString(s, "X")
	}
	for _, u := range users {
		s = strings.ReplaceAll(s, u, "USER")
	}
	return s
}

// attempt sends a REGISTER for user, answers the challenge with password
// and returns the challenge and the final answer.
func attempt(t *testing.T, p *siptest.Phone, user, password string) (*sip.Response, *sip.Response) {
	t.Helper()
	ctx := ctxT(t)
	mk := func() *sip.Request {
		req := p.RegisterRequest(600)
		aor := sip.Uri{Scheme: "sip", User: user, Host: domain}
		from := &sip.FromHeader{Address: aor}
		from.Params.Add("tag", "fixedtag")
		req.ReplaceHeader(from)
		req.ReplaceHeader(&sip.ToHeader{Address: aor})
		cid := sip.CallIDHeader("fixed-call-id")
		req.AppendHeader(&cid)
		return req
	}
	req := mk()
	req.AppendHeader(&sip.CSeqHeader{SeqNo: 1, MethodName: sip.REGISTER})
	chal, err := p.Send(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req2 := mk()
	req2.AppendHeader(&sip.CSeqHeader{SeqNo: 2, MethodName: sip.REGISTER})
	req2.AppendHeader(sip.NewHeader("Authorization", authorize(t, chal, req2, registrar.AlgMD5, user, password, 1)))
	final, err := p.Send(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	return chal, final
}

func TestUnknownUserIndistinguishableFromWrongPassword(t *testing.T) {
	var mu sync.Mutex
	var failures []string
	e := newEnv(t, func(o *registrar.Options) {
		o.OnAuthFailure = func(src netip.AddrPort, d, u string) {
			mu.Lock()
			failures = append(failures, u)
			mu.Unlock()
		}
	})
	p := e.phone(t, "udp", "probe", "x")
	chalKnown, wrongPass := attempt(t, p, "alice", "not-the-password")
	chalUnknown, unknownUser := attempt(t, p, "mallory", "whatever")
	if wrongPass.StatusCode != 403 || unknownUser.StatusCode != 403 {
		t.Fatalf("statuses %d and %d, want 403 both", wrongPass.StatusCode, unknownUser.StatusCode)
	}
	a, b := normalize(chalKnown.String(), "alice", "mallory"), normalize(chalUnknown.String(), "alice", "mallory")
	if a != b {
		t.Fatalf("challenges differ:\n%s\n---\n%s", a, b)
	}
	a, b = normalize(wrongPass.String(), "alice", "mallory"), normalize(unknownUser.String(), "alice", "mallory")
	if a != b {
		t.Fatalf("rejections differ:\n%s\n---\n%s", a, b)
	}
	mu.Lock()
	if len(failures) != 2 || failures[0] != "alice" || failures[1] != "mallory" {
		t.Fatalf("auth failures reported: %v", failures)
	}
	mu.Unlock()
	_, ok := attempt(t, p, "alice", "alice-secret")
	if ok.StatusCode != 200 {
		t.Fatalf("right password: %d", ok.StatusCode)
	}
}

// TestOnAuthSuccessCanRefuse: valid credentials are reported with the
// source, realm and username, and refused with 403 when the hook says so.
func TestOnAuthSuccessCanRefuse(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	refuse := true
	e := newEnv(t, func(o *registrar.Options) {
		o.OnAuthSuccess = func(src netip.AddrPort, d, u string) bool {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, src.Addr().Unmap().String()+" "+d+" "+u)
			return !refuse
		}
	})
	p := e.phone(t, "udp", "alice", "alice-secret")
	if _, res := attempt(t, p, "alice", "alice-secret"); res.StatusCode != 403 {
		t.Fatalf("refused valid credentials answered %d, want 403", res.StatusCode)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if _, res := attempt(t, p, "alice", "alice-secret"); res.StatusCode != 200 {
		t.Fatalf("accepted valid credentials answered %d, want 200", res.StatusCode)
	}
	if _, res := attempt(t, p, "alice", "wrong"); res.StatusCode != 403 {
		t.Fatalf("wrong password answered %d", res.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != seen[1] || !strings.HasPrefix(seen[0], "127.0.0.1 ") || !strings.HasSuffix(seen[0], " alice") {
		t.Fatalf("successes reported %q, want two for alice from 127.0.0.1 (not the failure)", seen)
	}
}

func TestSHA256AndReplay(t *testing.T) {
	e := newEnvAlgs(t, []string{"md5", "sha-256"}, nil)
	p := e.phone(t, "udp", "alice", "alice-secret")
	ctx := ctxT(t)
	req := p.RegisterRequest(600)
	chal, err := p.Send(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	send := func(alg string, nc uint32, uriOverride string) int {
		r := p.RegisterRequest(600)
		auth := authorize(t, chal, r, alg, "alice", "alice-secret", nc)
		if uriOverride != "" {
			auth = strings.Replace(auth, `uri="`+r.Recipient.String()+`"`, `uri="`+uriOverride+`"`, 1)
		}
		r.AppendHeader(sip.NewHeader("Authorization", auth))
		res, err := p.Send(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode
	}
	if s := send(registrar.AlgSHA256, 1, ""); s != 200 {
		t.Fatalf("sha-256: %d", s)
	}
	if s := send(registrar.AlgMD5, 2, ""); s != 200 {
		t.Fatalf("md5 nc=2: %d", s)
	}
	if s := send(registrar.AlgMD5, 2, ""); s != 401 {
		t.Fatalf("replayed nc: %d, want 401 (stale)", s)
	}
	if s := send(registrar.AlgMD5, 3, "sip:other.example"); s != 403 {
		t.Fatalf("digest uri of another request: %d, want 403", s)
	}
}

func TestIntervalTooBrief(t *testing.T) {
	e := newEnv(t, nil)
	p := e.phone(t, "udp", "alice", "alice-secret")
	res, err := p.Register(ctxT(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 423 || res.GetHeader("Min-Expires") == nil || res.GetHeader("Min-Expires").Value() != "60" {
		t.Fatalf("got %s", res)
	}
	res = p.MustRegister(ctxT(t), 999999)
	if v := res.GetHeaders("Contact")[0].Value(); !strings.Contains(v, "expires=3600") {
		t.Fatalf("expiry not clamped: %q", v)
	}
}

func registerContact(t *testing.T, p *siptest.Phone, contact string, expires int) *sip.Response {
	t.Helper()
	req := p.RegisterRequest(expires)
	var u sip.Uri
	if err := sip.ParseUri(contact, &u); err != nil {
		t.Fatal(err)
	}
	req.ReplaceHeader(&sip.ContactHeader{Address: u})
	res, err := p.SendAuth(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestMaxContactsReplacesSoonestExpiring(t *testing.T) {
	e := newEnv(t, nil)
	p := e.phone(t, "udp", "bob", "bob-secret") // MaxContacts 2
	for i, exp := range []int{600, 300, 900} {
		res := registerContact(t, p, fmt.Sprintf("sip:bob@127.0.0.1:%d", 6000+i), exp)
		if res.StatusCode != 200 {
			t.Fatalf("register %d: %d", i, res.StatusCode)
		}
	}
	got := map[string]bool{}
	for _, b := range e.reg.Lookup(tenant, "102") {
		got[b.Contact] = true
	}
	if len(got) != 2 || !got["sip:bob@127.0.0.1:6000"] || !got["sip:bob@127.0.0.1:6002"] {
		t.Fatalf("bindings %v: want 6000 and 6002 (6001 expired soonest)", got)
	}
}

func TestMaxContactsReject(t *testing.T) {
	e := newEnv(t, func(o *registrar.Options) { o.RejectWhenFull = true })
	p := e.phone(t, "udp", "bob", "bob-secret")
	for i := range 2 {
		if res := registerContact(t, p, fmt.Sprintf("sip:bob@127.0.0.1:%d", 6000+i), 600); res.StatusCode != 200 {
			t.Fatalf("register %d: %d", i, res.StatusCode)
		}
	}
	if res := registerContact(t, p, "sip:bob@127.0.0.1:6009", 600); res.StatusCode != 403 {
		t.Fatalf("third contact: %d, want 403", res.StatusCode)
	}
	if n := len(e.reg.Lookup(tenant, "102")); n != 2 {
		t.Fatalf("%d bindings", n)
	}
}

func TestWildcardUnregisterAndDrop(t *testing.T) {
	e := newEnv(t, nil)
	p := e.phone(t, "udp", "alice", "alice-secret")
	for i := range 3 {
		if res := registerContact(t, p, fmt.Sprintf("sip:alice@127.0.0.1:%d", 7000+i), 600); res.StatusCode != 200 {
			t.Fatalf("register: %d", res.StatusCode)
		}
	}
	if n := len(e.reg.Lookup(tenant, "101")); n != 3 {
		t.Fatalf("%d bindings, want 3", n)
	}
	req := p.RegisterRequest(0)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Wildcard: true}})
	res, err := p.SendAuth(ctxT(t), req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("wildcard: %v %v", res, err)
	}
	if n := len(e.reg.Lookup(tenant, "101")); n != 0 {
		t.Fatalf("%d bindings after *", n)
	}
	bad := p.RegisterRequest(600)
	bad.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Wildcard: true}})
	if res, _ := p.SendAuth(ctxT(t), bad); res == nil || res.StatusCode != 400 {
		t.Fatalf("wildcard without Expires 0: %v", res)
	}
	registerContact(t, p, "sip:alice@127.0.0.1:7100", 600)
	if n := e.reg.Drop(tenant, "101"); n != 1 {
		t.Fatalf("dropped %d", n)
	}
	if len(e.reg.List()) != 0 {
		t.Fatalf("list not empty after drop")
	}
}

func TestRegistrationsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	store, err := db.Open(dir, db.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *registrar.Options) { o.Store = store.Registrations() })
	p := e.phone(t, "udp", "alice", "alice-secret")
	p.MustRegister(ctxT(t), 600)
	if err := e.reg.Close(); err != nil {
		t.Fatal(err)
	}
	// An expired binding in the store is dropped at load.
	old := registrar.Binding{Tenant: tenant, Username: "alice", Extension: "101", Contact: "sip:alice@127.0.0.1:1", Expires: time.Now().Add(-time.Minute)}
	if err := store.Registrations().SaveBindings([]registrar.Binding{old}, nil); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store, err = db.Open(dir, db.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	auth, _ := registrar.NewAuth(registrar.AuthOptions{}, newDir())
	reg2, err := registrar.New(registrar.Options{Auth: auth, Store: store.Registrations()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bs := reg2.Lookup(tenant, "101")
	if len(bs) != 1 || bs[0].Contact != p.Contact() || bs[0].Source != p.Addr() || bs[0].Transport != "udp" {
		t.Fatalf("restored %+v", bs)
	}
	if n, _ := store.Registrations().Count(); n != 1 {
		t.Fatalf("store holds %d bindings, want 1 (expired removed)", n)
	}
}

func TestOptionsOutsideDialog(t *testing.T) {
	e := newEnv(t, nil)
	p := e.phone(t, "udp", "alice", "alice-secret")
	req := sip.NewRequest(sip.OPTIONS, sip.Uri{Scheme: "sip", Host: domain})
	req.SetDestination(e.udp.String())
	res, err := p.Send(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.GetHeader("Allow") == nil || !strings.Contains(res.GetHeader("Allow").Value(), "REGISTER") || res.GetHeader("Accept") == nil {
		t.Fatalf("OPTIONS answer: %s", res)
	}
}

// BenchmarkRegisterUDP measures authenticated REGISTERs end to end over
// loopback UDP: challenge, digest answer and 200, with the phone and the
// PBX in one process sharing the CPU.
func BenchmarkRegisterUDP(b *testing.B) {
	e := newEnv(b, nil)
	p := e.phone(b, "udp", "alice", "alice-secret")
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := p.Register(ctx, 600)
		if err != nil || res.StatusCode != 200 {
			b.Fatalf("register: %v %v", res, err)
		}
	}
}

func TestConcurrentRegistrations(t *testing.T) {
	e := newEnv(t, nil)
	const phones, rounds = 8, 25
	for i := range phones {
		e.dir.AddAccount(domain, registrar.Account{Username: fmt.Sprintf("load%d", i), Password: "pw", Extension: fmt.Sprintf("2%02d", i)})
	}
	errs := make(chan error, phones)
	var wg sync.WaitGroup
	for i := range phones {
		tr := "udp"
		if i%2 == 1 {
			tr = "tcp"
		}
		p := e.phone(t, tr, fmt.Sprintf("load%d", i), "pw")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				res, err := p.Register(ctxT(t), 600)
				if err != nil {
					errs <- err
					return
				}
				if res.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", res.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := e.reg.Count(); n != phones {
		t.Fatalf("%d bindings, want %d (one per phone, refreshed)", n, phones)
	}
}

// TestNATKeepalive: a phone whose Contact names another address than the
// REGISTER came from is behind NAT: over UDP it is granted at most the NAT
// expiry and pinged with OPTIONS through its mapping; over TCP its
// connection gets CRLF pings. A phone on its own address gets neither.
func TestNATKeepalive(t *testing.T) {
	e := newEnv(t, func(o *registrar.Options) {
		o.KeepaliveInterval = 100 * time.Millisecond
		o.NATExpires = 90 * time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.reg.Run(ctx) }()
	defer func() { cancel(); <-done }()

	natted := e.phone(t, "udp", "alice", "alice-secret")
	req := natted.RegisterRequest(3600)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "alice", Host: "192.168.77.9", Port: 5060}})
	res, err := natted.SendAuth(ctxT(t), req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("register: %v %v", res, err)
	}
	exp, _ := res.Contact().Params.Get("expires")
	if exp != "90" {
		t.Errorf("expiry granted behind NAT over UDP: %s, want the 90 s cap", exp)
	}
	direct := e.phone(t, "udp", "bob", "bob-secret")
	if res := direct.MustRegister(ctxT(t), 3600); res.Contact() == nil {
		t.Fatal("no contact in the answer")
	} else if exp, _ := res.Contact().Params.Get("expires"); exp != "3600" {
		t.Errorf("expiry granted to a phone on its own address: %s", exp)
	}

	deadline := time.Now().Add(5 * time.Second)
	for natted.OptionsReceived() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keepalive OPTIONS reached the phone behind NAT in 5 s; stats %+v", natted.OptionsReceived(), e.reg.KeepaliveStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := direct.OptionsReceived(); n != 0 {
		t.Errorf("%d keepalives sent to a phone not behind NAT", n)
	}

	tcp := e.phone(t, "tcp", "bob", "bob-secret")
	treq := tcp.RegisterRequest(3600)
	treq.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "bob", Host: "192.168.77.10", Port: 5060,
		UriParams: sip.HeaderParams{{K: "transport", V: "tcp"}}}})
	if res, err := tcp.SendAuth(ctxT(t), treq); err != nil || res.StatusCode != 200 {
		t.Fatalf("tcp register: %v %v", res, err)
	} else if exp, _ := res.Contact().Params.Get("expires"); exp != "3600" {
		t.Errorf("expiry over TCP shortened to %s: only UDP mappings need it", exp)
	}
	before := e.reg.KeepaliveStats()
	deadline = time.Now().Add(5 * time.Second)
	for {
		st := e.reg.KeepaliveStats()
		if st.Sent-st.Answered >= before.Sent-before.Answered+2 {
			if st.Failed != before.Failed {
				t.Fatalf("pings failed: %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CRLF pings on the TCP connection: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOnChange: every binding added, refreshed, removed, dropped and
// expired is told, outside the registrar's locks (the hook reads it back).
func TestOnChange(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var reg atomic.Pointer[registrar.Registrar] // set after the server runs
	clock := time.Now()
	e := newEnv(t, func(o *registrar.Options) {
		o.SweepInterval = 20 * time.Millisecond
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		o.OnChange = func(c registrar.Change, b registrar.Binding) {
			_ = reg.Load().Count() // would deadlock under the registrar's lock
			mu.Lock()
			got = append(got, c.String()+" "+b.Username)
			mu.Unlock()
		}
	})
	reg.Store(e.reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.reg.Run(ctx) }()
	defer func() { cancel(); <-done }()

	alice := e.phone(t, "udp", "alice", "alice-secret")
	alice.MustRegister(ctxT(t), 60)
	alice.MustRegister(ctxT(t), 60)
	alice.MustRegister(ctxT(t), 0)
	bob := e.phone(t, "udp", "bob", "bob-secret")
	bob.MustRegister(ctxT(t), 60)
	e.reg.Drop(tenant, "102")
	bob.MustRegister(ctxT(t), 60)
	mu.Lock()
	clock = clock.Add(2 * time.Minute)
	mu.Unlock()
	want := []string{"added alice", "refreshed alice", "removed alice", "added bob", "removed bob", "added bob", "expired bob"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		s := strings.Join(got, ", ")
		mu.Unlock()
		if n >= len(want) {
			if s != strings.Join(want, ", ") {
				t.Fatalf("changes %s\nwant    %s", s, strings.Join(want, ", "))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("changes %s; want %s", s, strings.Join(want, ", "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
