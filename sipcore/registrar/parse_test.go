package registrar

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
)

func TestParseCredentials(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Credentials
		err  bool
	}{
		{
			name: "md5 qop",
			in:   `Digest username="alice", realm="acme.example", nonce="abc", uri="sip:acme.example", response="0123", algorithm=MD5, cnonce="xyz", qop=auth, nc=0000000a`,
			want: Credentials{Username: "alice", Realm: "acme.example", Nonce: "abc", URI: "sip:acme.example", Response: "0123", Algorithm: "MD5", Cnonce: "xyz", QOP: "auth", NC: 10, hasNC: true},
		},
		{
			name: "no qop, lower-case scheme, escaped quote, unknown param",
			in:   `digest username="a\"b",realm="r",nonce="n",uri="sip:x",response="r1",foo=bar`,
			want: Credentials{Username: `a"b`, Realm: "r", Nonce: "n", URI: "sip:x", Response: "r1"},
		},
		{name: "basic scheme", in: `Basic YWxpY2U6c2VjcmV0`, err: true},
		{name: "unterminated", in: `Digest username="alice, realm="r"`, err: true},
		{name: "repeated", in: `Digest username="a", username="b", nonce="n", uri="u", response="r"`, err: true},
		{name: "bad nc", in: `Digest username="a", nonce="n", uri="u", response="r", nc=zz`, err: true},
		{name: "missing response", in: `Digest username="a", nonce="n", uri="u"`, err: true},
		{name: "garbage after value", in: `Digest username="a" x, nonce="n", uri="u", response="r"`, err: true},
		{name: "too long", in: "Digest username=\"" + strings.Repeat("a", 5000) + "\"", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCredentials(tt.in)
			if tt.err {
				if !errors.Is(err, ErrMalformedCredentials) {
					t.Fatalf("err = %v, want ErrMalformedCredentials", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDigestResponseRFC2617(t *testing.T) {
	// RFC 2617 section 3.5 example (HTTP, but the computation is the same).
	got, ok := DigestResponse("MD5", "Mufasa", "testrealm@host.com", "Circle Of Life", "GET", "/dir/index.html",
		"dcd98b7102dd2f0e8b11d0f600bfb0c093", "auth", 1, "0a4f113b")
	if !ok || got != "6629fae49393a05397450978507c4ef1" {
		t.Fatalf("got %q", got)
	}
	if _, ok := DigestResponse("SHA-512-256", "", "", "", "", "", "", "", 0, ""); ok {
		t.Fatalf("unsupported algorithm accepted")
	}
}

func TestParseExpires(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"0", 0, false},
		{" 3600 ", time.Hour, false},
		{"99999999999", (1<<32 - 1) * time.Second, false},
		{"", 0, true},
		{"-1", 0, true},
		{"1h", 0, true},
		{"123456789012345678901", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseExpires(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseExpires(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestBindingTarget(t *testing.T) {
	open := func(string, string) bool { return true }
	closed := func(string, string) bool { return false }
	ap := netip.MustParseAddrPort
	tests := []struct {
		name    string
		b       Binding
		conn    ConnChecker
		dest    netip.AddrPort
		viaConn bool
	}{
		{"lan udp uses contact", Binding{Contact: "sip:a@192.168.1.20:5062", Source: ap("192.168.1.20:5062"), Transport: "udp"}, nil, ap("192.168.1.20:5062"), false},
		{"lan udp other port still contact", Binding{Contact: "sip:a@192.168.1.20:5062", Source: ap("192.168.1.20:40000"), Transport: "udp"}, nil, ap("192.168.1.20:5062"), false},
		{"public source private contact is nat", Binding{Contact: "sip:a@192.168.1.20:5062", Source: ap("203.0.113.7:61000"), Transport: "udp"}, nil, ap("203.0.113.7:61000"), true},
		{"private contact from another address is nat", Binding{Contact: "sip:a@192.168.1.20:5062", Source: ap("10.8.0.5:40000"), Transport: "udp"}, nil, ap("10.8.0.5:40000"), true},
		{"public and equal", Binding{Contact: "sip:a@203.0.113.7:5060", Source: ap("203.0.113.7:5060"), Transport: "udp"}, nil, ap("203.0.113.7:5060"), false},
		{"hostname contact uses source", Binding{Contact: "sip:a@phone.local", Source: ap("10.0.0.9:5060"), Transport: "udp"}, nil, ap("10.0.0.9:5060"), true},
		{"tcp open connection", Binding{Contact: "sip:a@10.0.0.9:5060;transport=tcp", Source: ap("10.0.0.9:40123"), Transport: "tcp"}, open, ap("10.0.0.9:40123"), true},
		{"tcp closed connection dials contact", Binding{Contact: "sip:a@10.0.0.9:5060;transport=tcp", Source: ap("10.0.0.9:40123"), Transport: "tcp"}, closed, ap("10.0.0.9:5060"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, ok := tt.b.Target(tt.conn)
			if !ok {
				t.Fatal("no target")
			}
			if tg.Destination != tt.dest || tg.ViaConnection != tt.viaConn {
				t.Fatalf("got %s via=%v, want %s via=%v", tg.Destination, tg.ViaConnection, tt.dest, tt.viaConn)
			}
		})
	}
	for _, tt := range tests {
		// Over UDP a call goes to the source exactly when NAT was revealed.
		if tt.b.Transport == "udp" && tt.b.BehindNAT() != tt.viaConn {
			t.Errorf("%s: BehindNAT %v", tt.name, !tt.viaConn)
		}
	}
	if _, ok := (Binding{Contact: "not a uri"}).Target(nil); ok {
		t.Fatalf("target for an unparsable contact")
	}
}

func TestNonceExpiresStale(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	dir := staticDir{}
	a, err := NewAuth(AuthOptions{NonceTTL: time.Minute, Now: clock.now}, dir)
	if err != nil {
		t.Fatal(err)
	}
	nonce := a.newNonce("acme.example")
	if ok, _, _ := a.checkNonce(nonce, "acme.example"); !ok {
		t.Fatal("fresh nonce rejected")
	}
	if ok, _, _ := a.checkNonce(nonce, "other.example"); ok {
		t.Fatal("nonce accepted for another realm")
	}
	tampered := []byte(nonce)
	tampered[3] ^= 1
	if ok, _, _ := a.checkNonce(string(tampered), "acme.example"); ok {
		t.Fatal("tampered nonce accepted")
	}
	req := signedRegister(t, a, nonce, "alice", "pw", 1)
	if r := a.Check(req, false, "acme.example"); r.Outcome != Authorized {
		t.Fatalf("fresh: %v", r.Outcome)
	}
	clock.add(2 * time.Minute)
	req = signedRegister(t, a, nonce, "alice", "pw", 2)
	if r := a.Check(req, false, "acme.example"); r.Outcome != Challenged || !r.Stale {
		t.Fatalf("expired: %+v", r)
	}
	res := a.Response(req, Result{Outcome: Challenged, Stale: true}, false, "acme.example")
	if v := res.GetHeader("WWW-Authenticate").Value(); !strings.Contains(v, "stale=true") {
		t.Fatalf("challenge %q", v)
	}
}

type staticDir struct{}

func (staticDir) ServesDomain(d string) bool { return d == "acme.example" }
func (staticDir) Account(d, u string) (Account, bool) {
	if d == "acme.example" && u == "alice" {
		return Account{Tenant: "acme", Username: "alice", Password: "pw", Extension: "101"}, true
	}
	return Account{}, false
}

func signedRegister(t testing.TB, a *Auth, nonce, user, pw string, nc uint32) *sip.Request {
	req := sip.NewRequest(sip.REGISTER, sip.Uri{Scheme: "sip", Host: "acme.example"})
	uri := req.Recipient.String()
	resp, _ := DigestResponse("MD5", user, "acme.example", pw, "REGISTER", uri, nonce, "auth", nc, "cn")
	req.AppendHeader(sip.NewHeader("Authorization", `Digest username="`+user+`", realm="acme.example", nonce="`+nonce+`", uri="`+uri+`", response="`+resp+`", algorithm=MD5, cnonce="cn", qop=auth, nc=`+hex8(nc)))
	return req
}

func hex8(n uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[n&0xf]
		n >>= 4
	}
	return string(b)
}

func FuzzParseCredentials(f *testing.F) {
	f.Add(`Digest username="alice", realm="acme.example", nonce="abc", uri="sip:acme.example", response="0123", algorithm=MD5, cnonce="xyz", qop=auth, nc=00000001`)
	f.Add(`Digest username="a\"b",realm="r",nonce="n",uri="sip:x",response="r1"`)
	f.Add(`Digest ,,,`)
	f.Add(`Digest a="`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCredentials(s)
		if err != nil {
			return
		}
		if c.Username == "" || c.Nonce == "" || c.URI == "" || c.Response == "" {
			t.Fatalf("accepted incomplete credentials %+v", c)
		}
		// The digest uri is parsed when it differs from the Request-URI text.
		_ = URIMatches(c.URI, sip.Uri{Scheme: "sip", Host: "acme.example"})
	})
}

func FuzzParseExpires(f *testing.F) {
	for _, s := range []string{"0", "3600", " 60 ", "-1", "99999999999999999999", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseExpires(s)
		if err == nil && (d < 0 || d > (1<<32-1)*time.Second) {
			t.Fatalf("ParseExpires(%q) = %v", s, d)
		}
	})
}

// FuzzRegisterContacts feeds arbitrary Contact and Expires header values of
// an authenticated REGISTER to the registrar: it must answer, never panic,
// and never hold more bindings than allowed.
func FuzzRegisterContacts(f *testing.F) {
	f.Add("<sip:alice@127.0.0.1:5062>;expires=60", "3600")
	f.Add("*", "0")
	f.Add(`"A" <sip:alice@10.0.0.1;transport=tcp>;q=0.5;+sip.instance="<urn:uuid:1>", <sip:alice@10.0.0.2>;expires=0`, "")
	f.Add("<sip:alice@h>;expires=abc", "x")
	a, err := NewAuth(AuthOptions{}, staticDir{})
	if err != nil {
		f.Fatal(err)
	}
	r, err := New(Options{Auth: a, DefaultMaxContacts: 3}, nil)
	if err != nil {
		f.Fatal(err)
	}
	acct, _ := staticDir{}.Account("acme.example", "alice")
	f.Fuzz(func(t *testing.T, contact, expires string) {
		msg := "REGISTER sip:acme.example SIP/2.0\r\n" +
			"Via: SIP/2.0/UDP 127.0.0.1:5062;branch=z9hG4bK1\r\n" +
			"From: <sip:alice@acme.example>;tag=1\r\nTo: <sip:alice@acme.example>\r\n" +
			"Call-ID: fuzz\r\nCSeq: 1 REGISTER\r\nContact: " + contact + "\r\n"
		if expires != "" {
			msg += "Expires: " + expires + "\r\n"
		}
		msg += "Content-Length: 0\r\n\r\n"
		m, err := sip.ParseMessage([]byte(msg))
		if err != nil {
			return
		}
		req, ok := m.(*sip.Request)
		if !ok || req.CSeq() == nil || req.CallID() == nil {
			return
		}
		req.CSeq().SeqNo = uint32(time.Now().UnixNano()) // never out of order
		res := r.apply(req, acct, "acme.example")
		if res == nil || res.StatusCode < 200 {
			t.Fatalf("no final answer")
		}
		if n := len(r.LookupAccount("acme", "alice")); n > 3 {
			t.Fatalf("%d bindings, max 3", n)
		}
	})
}

func TestReplayTableIsBounded(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	a, err := NewAuth(AuthOptions{MaxTrackedNonces: ncShards, Now: clock.now}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for range 200 {
		nonce := a.newNonce("acme.example")
		if r := a.Check(signedRegister(t, a, nonce, "alice", "pw", 1), false, "acme.example"); r.Outcome == Authorized {
			accepted++
		} else if !r.Stale {
			t.Fatalf("full table answered %+v, want a stale challenge", r)
		}
	}
	if n := a.NonceCount(); n > ncShards {
		t.Fatalf("table holds %d nonces, cap %d", n, ncShards)
	}
	if accepted == 0 || accepted == 200 {
		t.Fatalf("accepted %d of 200", accepted)
	}
	// Once the nonces expire, room is made again.
	clock.add(2 * DefaultNonceTTL)
	nonce := a.newNonce("acme.example")
	if r := a.Check(signedRegister(t, a, nonce, "alice", "pw", 1), false, "acme.example"); r.Outcome != Authorized {
		t.Fatalf("after expiry: %+v", r)
	}
}

// FuzzBindingTarget feeds arbitrary registered Contact URIs and sources to
// the routing decision: it must not panic, and a target must have a
// destination.
func FuzzBindingTarget(f *testing.F) {
	f.Add("sip:alice@192.168.1.20:5062", "203.0.113.7:61000", "udp")
	f.Add("sip:alice@10.0.0.9:5060;transport=tcp", "10.0.0.9:40123", "tcp")
	f.Add("sips:[::1]:5061", "[::1]:5061", "tcp")
	f.Add("sip:phone.local", "", "")
	f.Fuzz(func(t *testing.T, contact, source, transport string) {
		src, _ := netip.ParseAddrPort(source)
		b := Binding{Contact: contact, Source: src, Transport: transport}
		for _, conn := range []ConnChecker{nil, func(string, string) bool { return true }} {
			if tg, ok := b.Target(conn); ok && !tg.Destination.IsValid() {
				t.Fatalf("target without destination for %q from %q", contact, source)
			}
		}
	})
}

// TestProxyChallengeOrder: INVITEs are challenged (407) by the same Auth,
// one Proxy-Authenticate per configured algorithm, in the configured order.
func TestProxyChallengeOrder(t *testing.T) {
	for _, tc := range []struct {
		algs []string
		want []string
	}{
		{nil, []string{AlgMD5}},
		{[]string{"sha-256", "md5"}, []string{AlgSHA256, AlgMD5}},
		{[]string{"md5", "sha-256"}, []string{AlgMD5, AlgSHA256}},
	} {
		a, err := NewAuth(AuthOptions{Algorithms: tc.algs}, staticDir{})
		if err != nil {
			t.Fatal(err)
		}
		req := sip.NewRequest(sip.INVITE, sip.Uri{Scheme: "sip", User: "101", Host: "acme.example"})
		req.AppendHeader(&sip.CSeqHeader{SeqNo: 1, MethodName: sip.INVITE})
		res := a.Response(req, Result{Outcome: Challenged}, true, "acme.example")
		if res.StatusCode != sip.StatusProxyAuthRequired || len(res.GetHeaders("WWW-Authenticate")) != 0 {
			t.Fatalf("%v: %d with WWW-Authenticate %v", tc.algs, res.StatusCode, res.GetHeaders("WWW-Authenticate"))
		}
		hs := res.GetHeaders("Proxy-Authenticate")
		if len(hs) != len(tc.want) {
			t.Fatalf("%v: %d challenges, want %d", tc.algs, len(hs), len(tc.want))
		}
		for i, alg := range tc.want {
			if v := hs[i].Value(); !strings.Contains(v, "algorithm="+alg+",") {
				t.Errorf("%v: challenge %d is %q, want %s", tc.algs, i, v, alg)
			}
		}
	}
}

// TestContactValueAsSipgoWritesIt: the Contact values a 200 lists, kept as
// text, are what the parsed ContactHeader they replace wrote, for contacts
// as phones send them (parameters, IPv6, user=phone, an instance id).
func TestContactValueAsSipgoWritesIt(t *testing.T) {
	for _, c := range []struct{ contact, instance string }{
		{"<sip:alice@10.0.0.1:5070;transport=udp>", ""},
		{"<sip:alice@10.0.0.1;transport=tcp;ob>", `<urn:uuid:00000000-0000-1000-8000-000A95A0E128>`},
		{"<sips:+12125550100@[2001:db8::1]:5061;user=phone>", ""},
		{`"Alice" <sip:alice@host.example;rinstance=abc;x-a=1>`, "<urn:uuid:a b>"},
		{"sip:bob@192.0.2.4", ""},
	} {
		var ch sip.ContactHeader
		if _, err := sip.ParseAddressValue(c.contact, &ch.Address, &ch.Params); err != nil {
			t.Fatalf("%s: %v", c.contact, err)
		}
		b := Binding{Contact: ch.Address.String(), InstanceID: c.instance}
		// What the 200 listed before: the URI parsed again, with parameters.
		var u sip.Uri
		if err := sip.ParseUri(b.Contact, &u); err != nil {
			t.Fatal(err)
		}
		want := &sip.ContactHeader{Address: u}
		want.Params.Add("expires", "597")
		if b.InstanceID != "" {
			want.Params.Add("+sip.instance", b.InstanceID)
		}
		if got := contactValue(&b, 597); got != want.Value() {
			t.Fatalf("contact %s: %q, sipgo writes %q", c.contact, got, want.Value())
		}
	}
}

// TestParseCredentialsCopiesNothing: quoted values without escapes are taken
// from the header as they are; parsing a REGISTER's credentials allocates
// nothing (it runs for every authenticated request).
func TestParseCredentialsCopiesNothing(t *testing.T) {
	in := `Digest username="alice", realm="acme.example", nonce="abc", uri="sip:acme.example", response="0123", algorithm=MD5, cnonce="xyz", qop=auth, nc=0000000a`
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseCredentials(in); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ParseCredentials allocates %.0f times", n)
	}
}
