package guard_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/config"
	"pbx/appliance/guard"
	"pbx/sipcore"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

const domain = "acme.example"

// pbx is a SIP server on 127.0.0.1 whose admission hook and authentication
// failures go to a guard.
type pbx struct {
	g   *guard.Guard
	udp netip.AddrPort
}

func startPBX(t *testing.T, sec config.Security) *pbx {
	t.Helper()
	g, err := guard.New(guard.Options{Security: sec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sipcore.New(sipcore.Options{
		Listeners: []sipcore.Listener{{ID: "udp", Transport: "udp", BindHost: "127.0.0.1"}},
		Admit:     g.Admit,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := siptest.NewDirectory()
	dir.AddDomain("acme", domain)
	dir.AddAccount(domain, registrar.Account{Username: "alice", Password: "alice-secret", Extension: "101"})
	auth, err := registrar.NewAuth(registrar.AuthOptions{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registrar.New(registrar.Options{Auth: auth, OnAuthFailure: g.OnAuthFailure}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(sip.REGISTER, reg.HandleRegister)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- srv.Run(ctx) }()
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		srv.Close()
		reg.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("sip server not ready")
	}
	p := &pbx{g: g}
	p.udp, _ = srv.Addr("udp")
	return p
}

// rawUA is a minimal UDP user agent bound to one loopback address, for
// sources other than 127.0.0.1 (siptest phones bind 127.0.0.1 only).
type rawUA struct {
	t    *testing.T
	c    *net.UDPConn
	addr netip.AddrPort
	to   netip.AddrPort
	seq  int
}

func newRawUA(t *testing.T, ip string, to netip.AddrPort) *rawUA {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawUA{t: t, c: c, addr: c.LocalAddr().(*net.UDPAddr).AddrPort(), to: to}
}

func (u *rawUA) send(msg string) {
	u.t.Helper()
	if _, err := u.c.WriteToUDPAddrPort([]byte(msg), u.to); err != nil {
		u.t.Fatal(err)
	}
}

// read returns the next datagram, or "" when none comes within d.
func (u *rawUA) read(d time.Duration) string {
	_ = u.c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 8192)
	n, _, err := u.c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func (u *rawUA) options(callID string) string {
	u.seq++
	return fmt.Sprintf("OPTIONS sip:%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;rport;branch=z9hG4bK%s-%d\r\n"+
		"From: <sip:probe@%s>;tag=%s\r\nTo: <sip:%s>\r\nCall-ID: %s\r\nCSeq: %d OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
		domain, u.addr, callID, u.seq, domain, callID, domain, callID, u.seq)
}

func (u *rawUA) register(callID, user, authz string) string {
	u.seq++
	var b strings.Builder
	fmt.Fprintf(&b, "REGISTER sip:%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;rport;branch=z9hG4bK%s-%d\r\n", domain, u.addr, callID, u.seq)
	fmt.Fprintf(&b, "From: <sip:%s@%s>;tag=%s\r\nTo: <sip:%s@%s>\r\nCall-ID: %s\r\nCSeq: %d REGISTER\r\n", user, domain, callID, user, domain, callID, u.seq)
	fmt.Fprintf(&b, "Contact: <sip:%s@%s>\r\nExpires: 60\r\nMax-Forwards: 70\r\n", user, u.addr)
	if authz != "" {
		fmt.Fprintf(&b, "Authorization: %s\r\n", authz)
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	return b.String()
}

var (
	statusRe = regexp.MustCompile(`^SIP/2\.0 (\d{3})`)
	nonceRe  = regexp.MustCompile(`nonce="([^"]+)"`)
	realmRe  = regexp.MustCompile(`realm="([^"]+)"`)
)

func status(msg string) string {
	if m := statusRe.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

// guessPassword sends one REGISTER, answers the 401 with password and
// returns the final status ("" when nothing came back).
func (u *rawUA) guessPassword(user, password string, wait time.Duration) string {
	callID := fmt.Sprintf("crack-%d", u.seq)
	u.send(u.register(callID, user, ""))
	res := u.read(wait)
	if status(res) != "401" {
		return status(res)
	}
	nonce, realm := nonceRe.FindStringSubmatch(res), realmRe.FindStringSubmatch(res)
	if nonce == nil || realm == nil {
		u.t.Fatalf("challenge without realm or nonce:\n%s", res)
	}
	uri := "sip:" + domain
	resp, _ := registrar.DigestResponse("MD5", user, realm[1], password, "REGISTER", uri, nonce[1], "auth", 1, "c0ffee")
	authz := fmt.Sprintf(`Digest username="%s", realm="%s", nonce="%s", uri="%s", response="%s", algorithm=MD5, qop=auth, nc=00000001, cnonce="c0ffee"`,
		user, realm[1], nonce[1], uri, resp)
	u.send(u.register(callID, user, authz))
	return status(u.read(wait))
}

func sipSecurity() config.Security {
	return config.Security{
		Enabled:      true,
		PacketRate:   20,
		PacketBurst:  40,
		AuthFailures: 3,
		AuthWindow:   config.Duration(10 * time.Minute),
		BanDuration:  config.Duration(10 * time.Minute),
		BanMax:       config.Duration(24 * time.Hour),
		MaxTracked:   1000,
		// Every test source is on loopback: trust none of it.
		TrustLoopback: false,
	}
}

// A source flooding OPTIONS from 127.0.0.2 is held to its packet rate while
// 127.0.0.3 is answered throughout.
func TestFloodingSourceDroppedOthersServed(t *testing.T) {
	p := startPBX(t, sipSecurity())
	flood := newRawUA(t, "127.0.0.2", p.udp)
	other := newRawUA(t, "127.0.0.3", p.udp)

	// About 2,000 packets per second, 100 times the rate, paced so that
	// the kernel's socket buffer is not what drops them.
	start := time.Now()
	const sent = 2000
	good := 0
	for i := range sent {
		flood.send(flood.options(fmt.Sprintf("flood-%d", i)))
		if i%20 == 19 {
			time.Sleep(10 * time.Millisecond)
		}
		if i%200 == 199 {
			good++
			callID := fmt.Sprintf("good-%d", i)
			other.send(other.options(callID))
			if res := other.read(5 * time.Second); status(res) != "200" {
				t.Fatalf("127.0.0.3 not answered during the flood (packet %d): %q", i, res)
			}
		}
	}
	elapsed := time.Since(start)
	// Count the answers the flooder got.
	answered := 0
	for i := 0; i < sent; i++ {
		if status(flood.read(500*time.Millisecond)) == "" {
			break
		}
		answered++
	}
	limit := 40 + int(20*(elapsed+time.Second).Seconds()) + 1
	if answered > limit {
		t.Fatalf("flooder got %d answers to %d OPTIONS in %s, want at most burst+rate*t = %d", answered, sent, elapsed, limit)
	}
	if answered == 0 {
		t.Fatal("flooder got no answer at all: its burst should have been served")
	}
	c := p.g.Counters()
	seen := c.Packets - uint64(good)
	if seen < sent/2 {
		t.Fatalf("only %d of %d flood packets reached the guard", seen, sent)
	}
	if c.RateLimited < seen-uint64(limit) || c.Dropped != c.RateLimited {
		t.Fatalf("counters %+v: want at least %d of %d flood packets rate limited", c, seen-uint64(limit), seen)
	}
	if len(p.g.Bans()) != 0 {
		t.Fatal("flooding banned the source; only authentication failures ban")
	}
	t.Logf("flooder: %d of %d answered in %s; counters %+v", answered, sent, elapsed, c)
}

// A REGISTER brute force from 127.0.0.2 is banned after authFailures wrong
// passwords; a phone with the right password keeps registering.
func TestBruteForceRegisterBanned(t *testing.T) {
	sec := sipSecurity()
	p := startPBX(t, sec)
	attacker := newRawUA(t, "127.0.0.2", p.udp)
	phone := siptest.NewPhone(t, siptest.Options{Username: "alice", Password: "alice-secret", Domain: domain, PBX: p.udp})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for i := range sec.AuthFailures {
		if st := attacker.guessPassword("alice", fmt.Sprintf("guess%d", i), 5*time.Second); st != "403" {
			t.Fatalf("guess %d answered %q, want 403", i+1, st)
		}
	}
	if st := attacker.guessPassword("alice", "alice-secret", time.Second); st != "" {
		t.Fatalf("banned source answered %s, want silence (even with the right password)", st)
	}
	bans := p.g.Bans()
	if len(bans) != 1 || bans[0].IP != netip.MustParseAddr("127.0.0.2") || bans[0].Offences != 1 {
		t.Fatalf("bans %+v, want 127.0.0.2 once", bans)
	}
	phone.MustRegister(ctx, 60)

	if err := p.g.Lift(bans[0].IP); err != nil {
		t.Fatal(err)
	}
	if st := attacker.guessPassword("alice", "alice-secret", 5*time.Second); st != "200" {
		t.Fatalf("after lift, the right password got %q, want 200", st)
	}
	c := p.g.Counters()
	if c.AuthFailures != uint64(sec.AuthFailures) || c.Banned == 0 || c.BansIssued != 1 || c.BansActive != 0 {
		t.Fatalf("counters %+v", c)
	}
}

// On the wire: a denied source and an oversize datagram get no answer, the
// same request small and from elsewhere does.
func TestDenyAndMaxDatagramOnTheWire(t *testing.T) {
	sec := sipSecurity()
	sec.Deny = []string{"127.0.0.4"}
	sec.MaxDatagram = 600
	p := startPBX(t, sec)
	denied := newRawUA(t, "127.0.0.4", p.udp)
	other := newRawUA(t, "127.0.0.3", p.udp)

	denied.send(denied.options("denied-1"))
	if res := denied.read(time.Second); res != "" {
		t.Fatalf("denied source answered:\n%s", res)
	}
	padded := strings.Replace(other.options("big-1"), "Content-Length: 0", "X-Padding: "+strings.Repeat("a", 600)+"\r\nContent-Length: 0", 1)
	other.send(padded)
	if res := other.read(time.Second); res != "" {
		t.Fatalf("oversize datagram answered:\n%s", res)
	}
	other.send(other.options("small-1"))
	if res := other.read(5 * time.Second); status(res) != "200" {
		t.Fatalf("small datagram from an admitted source: %q, want 200", res)
	}
	if c := p.g.Counters(); c.Denied != 1 || c.Oversize != 1 || c.Dropped != 2 {
		t.Fatalf("counters %+v, want one denied and one oversize", c)
	}
}
