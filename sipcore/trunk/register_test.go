package trunk

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"
	"github.com/miekg/dns"

	"pbx/sipcore"
)

// registrar is a carrier's registrar on its own loopback address: it
// challenges every REGISTER without credentials, checks the digest and
// answers with status (200 granting the asked expiry, or a refusal).
type registrar struct {
	srv  *sipcore.Server
	addr netip.AddrPort

	mu       sync.Mutex
	status   int
	grant    string // Contact expires granted; empty: what was asked
	accepted []registered
	attempts int
}

type registered struct {
	at        time.Time
	expires   string
	contact   string
	callID    string
	cseq      uint32
	transport string
	ruri      string
}

const (
	testUser = "trunk-user"
	testPass = "trunk-secret"
	realm    = "carrier.test"
	nonce    = "0123456789abcdef"
)

// startServer binds a SIP server on host, lets setup register handlers
// (before Run, as sipcore requires) and runs it.
func startServer(t *testing.T, host string, setup func(*sipcore.Server)) *sipcore.Server {
	t.Helper()
	s, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{
		{ID: "udp", Transport: "udp", BindHost: host}, {ID: "tcp", Transport: "tcp", BindHost: host}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = s.Close() })
	return s
}

func startRegistrar(t *testing.T, status int) *registrar {
	t.Helper()
	r := &registrar{status: status}
	r.srv = startServer(t, "127.0.0.2", func(s *sipcore.Server) { s.Handle(sip.REGISTER, r.handle) })
	<-r.srv.Ready()
	r.addr, _ = r.srv.Addr("udp")
	return r
}

func (r *registrar) handle(req *sip.Request, tx sip.ServerTransaction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	h := req.GetHeader("Authorization")
	if h == nil {
		res := sip.NewResponseFromRequest(req, sip.StatusUnauthorized, "Unauthorized", nil)
		chal := digest.Challenge{Realm: realm, Nonce: nonce, Algorithm: "MD5"}
		res.AppendHeader(sip.NewHeader("WWW-Authenticate", chal.String()))
		_ = tx.Respond(res)
		return
	}
	cred, err := digest.ParseCredentials(h.Value())
	if err != nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusBadRequest, "Bad Request", nil))
		return
	}
	want, err := digest.Digest(&digest.Challenge{Realm: realm, Nonce: nonce, Algorithm: "MD5"},
		digest.Options{Method: "REGISTER", URI: cred.URI, Username: testUser, Password: testPass})
	if err != nil || cred.Username != testUser || cred.Response != want.Response {
		_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusForbidden, "Forbidden", nil))
		return
	}
	if r.status != sip.StatusOK {
		_ = tx.Respond(sip.NewResponseFromRequest(req, r.status, "Refused", nil))
		return
	}
	exp := req.GetHeader("Expires").Value()
	r.accepted = append(r.accepted, registered{at: time.Now(), expires: exp, contact: req.Contact().Address.String(),
		callID: req.CallID().Value(), cseq: req.CSeq().SeqNo, transport: req.Transport(), ruri: req.Recipient.String()})
	res := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)
	ct := *req.Contact()
	grant := exp
	if r.grant != "" {
		grant = r.grant
	}
	ct.Params = sip.HeaderParams{{K: "expires", V: grant}}
	res.AppendHeader(&ct)
	_ = tx.Respond(res)
}

func (r *registrar) snapshot() ([]registered, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]registered(nil), r.accepted...), r.attempts
}

func startPBX(t *testing.T, tr Trunk, opts Options) *Manager {
	t.Helper()
	pbx := startServer(t, "127.0.0.1", nil)
	<-pbx.Ready()
	opts.SIP = pbx
	m, err := New([]Trunk{tr}, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// TestRegisterAndRefreshOnTime: the trunk registers with digest, asks for
// its expiry and re-registers before the granted expiry lapses, on the
// same Call-ID with a growing CSeq.
func TestRegisterAndRefreshOnTime(t *testing.T) {
	reg := startRegistrar(t, sip.StatusOK)
	const expiry = 3 * time.Second
	m := startPBX(t, Trunk{Name: "carrier", Host: "127.0.0.2", Port: int(reg.addr.Port()), Username: testUser, Password: testPass,
		Register: true, Expiry: expiry, ContactUser: "pbx-line1", AutoIPs: true}, Options{})
	waitFor(t, "registered", func() bool { return m.Status()[0].State == StateRegistered })
	st := m.Status()[0]
	if until := time.Until(st.ExpiresAt); until <= 0 || until > expiry {
		t.Errorf("expires_at %v is not within the granted %v", st.ExpiresAt, expiry)
	}
	if st.Password != "" {
		t.Error("status leaks the password")
	}
	deadline := time.Now().Add(4 * expiry)
	for {
		acc, _ := reg.snapshot()
		if len(acc) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d registrations in %v", len(acc), 4*expiry)
		}
		time.Sleep(50 * time.Millisecond)
	}
	acc, _ := reg.snapshot()
	for i, a := range acc {
		if a.expires != "3" {
			t.Errorf("REGISTER %d asked Expires %s, want 3", i, a.expires)
		}
		if !strings.HasPrefix(a.contact, "sip:pbx-line1@127.0.0.1:") {
			t.Errorf("contact %s", a.contact)
		}
		if i == 0 {
			continue
		}
		gap := a.at.Sub(acc[i-1].at)
		if gap >= expiry || gap < expiry/2 {
			t.Errorf("re-registration %d came %v after the previous one; want before the %v expiry and not early", i, gap, expiry)
		}
		if a.callID != acc[0].callID || a.cseq <= acc[i-1].cseq {
			t.Errorf("re-registration %d: call-id %s cseq %d after %s %d", i, a.callID, a.cseq, acc[0].callID, acc[i-1].cseq)
		}
	}
}

// TestRegisterFailureBacksOff: a refused registration is reported with its
// status and retried with a growing delay; Refresh retries at once.
func TestRegisterFailureBacksOff(t *testing.T) {
	reg := startRegistrar(t, sip.StatusForbidden)
	var smu sync.Mutex
	var states []string
	onState := func(st Status) {
		smu.Lock()
		states = append(states, st.State)
		smu.Unlock()
	}
	m := startPBX(t, Trunk{Name: "carrier", Host: "127.0.0.2", Port: int(reg.addr.Port()), Username: testUser, Password: testPass,
		Register: true, Expiry: time.Minute}, Options{RetryMin: 200 * time.Millisecond, RetryMax: 800 * time.Millisecond, OnState: onState})
	waitFor(t, "failure reported", func() bool { return m.Status()[0].State == StateFailed })
	st := m.Status()[0]
	if !strings.Contains(st.LastError, "403") || !st.ExpiresAt.IsZero() {
		t.Errorf("status after refusal: %+v", st)
	}
	// Each attempt is a challenge and an authenticated REGISTER. With
	// backoff 0.2, 0.4, 0.8, 0.8 s (±20%) about 5 attempts fit in 2.5 s;
	// without backoff there would be dozens.
	_, before := reg.snapshot()
	time.Sleep(2500 * time.Millisecond)
	_, after := reg.snapshot()
	n := (after - before) / 2
	if n < 2 || n > 7 {
		t.Errorf("%d attempts in 2.5s, want between 2 and 7 with backoff", n)
	}
	reg.mu.Lock()
	reg.status = sip.StatusOK
	reg.mu.Unlock()
	if err := m.Refresh("carrier"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "registered after refresh", func() bool { return m.Status()[0].State == StateRegistered })
	if st := m.Status()[0]; st.LastError != "" {
		t.Errorf("last error kept after success: %q", st.LastError)
	}
	// Told once per change, not once per attempt.
	smu.Lock()
	defer smu.Unlock()
	if strings.Join(states, " ") != "failed registered" {
		t.Errorf("state changes told: %v", states)
	}
}

// TestRegisterNoAnswer: a registrar that never answers is a failure with a
// time-out, not a hang.
func TestRegisterNoAnswer(t *testing.T) {
	silent := startServer(t, "127.0.0.3", nil) // bound, never answers REGISTER: 405 would be an answer
	<-silent.Ready()
	addr, _ := silent.Addr("udp")
	silent.Close()
	m := startPBX(t, Trunk{Name: "carrier", Host: "127.0.0.3", Port: int(addr.Port()), Username: testUser, Password: testPass, Register: true},
		Options{RegisterTimeout: 700 * time.Millisecond, RetryMin: time.Hour})
	waitFor(t, "failure reported", func() bool { return m.Status()[0].State == StateFailed })
	if st := m.Status()[0]; st.LastError == "" {
		t.Errorf("no error: %+v", st)
	}
}

// TestRegisterOverTCP: a tcp trunk registers over TCP with a Contact that
// says so.
func TestRegisterOverTCP(t *testing.T) {
	reg := startRegistrar(t, sip.StatusOK)
	tcp, _ := reg.srv.Addr("tcp")
	m := startPBX(t, Trunk{Name: "carrier", Host: "127.0.0.2", Port: int(tcp.Port()), Transport: "tcp", Username: testUser, Password: testPass,
		Register: true, Expiry: time.Minute}, Options{})
	waitFor(t, "registered", func() bool { return m.Status()[0].State == StateRegistered })
	acc, _ := reg.snapshot()
	if len(acc) != 1 || acc[0].transport != "TCP" || !strings.HasSuffix(acc[0].contact, ";transport=tcp") || acc[0].expires != "60" {
		t.Errorf("registrations %+v", acc)
	}
}

// TestRegisterPeriodIsConfiguredExpiry: a carrier that grants an hour does
// not stretch the period the operator configured.
func TestRegisterPeriodIsConfiguredExpiry(t *testing.T) {
	reg := startRegistrar(t, sip.StatusOK)
	reg.mu.Lock()
	reg.grant = "3600"
	reg.mu.Unlock()
	const expiry = 2 * time.Second
	m := startPBX(t, Trunk{Name: "carrier", Host: "127.0.0.2", Port: int(reg.addr.Port()), Username: testUser, Password: testPass,
		Register: true, Expiry: expiry}, Options{})
	waitFor(t, "registered", func() bool { return m.Status()[0].State == StateRegistered })
	deadline := time.Now().Add(3 * expiry)
	for {
		if acc, _ := reg.snapshot(); len(acc) >= 3 {
			for i := 1; i < len(acc); i++ {
				if gap := acc[i].at.Sub(acc[i-1].at); gap >= expiry {
					t.Errorf("re-registration %d came %v after the previous one; the configured period is %v", i, gap, expiry)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			acc, _ := reg.snapshot()
			t.Fatalf("%d registrations in %v: the carrier's hour was taken as the period", len(acc), 3*expiry)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRegisterSRVFailover: a carrier domain with SRV records only is
// registered at its targets in priority order; a target answering 503 and
// one that never answers are passed over for the next (RFC 3263 4.3), and
// the Request-URI names the domain without a port.
func TestRegisterSRVFailover(t *testing.T) {
	busy := startServer(t, "127.0.0.3", func(s *sipcore.Server) {
		s.Handle(sip.REGISTER, func(req *sip.Request, tx sip.ServerTransaction) {
			_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusServiceUnavailable, "Service Unavailable", nil))
		})
	})
	<-busy.Ready()
	busyAddr, _ := busy.Addr("udp")
	silent, err := net.ListenPacket("udp", "127.0.0.4:0") // bound, never read
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silentPort := silent.LocalAddr().(*net.UDPAddr).Port
	reg := startRegistrar(t, sip.StatusOK)

	z := startZone(t)
	z.set(func(z *zone) {
		z.srv["_sip._udp.srvonly.test."] = []*dns.SRV{
			{Target: "c.srvonly.test.", Port: reg.addr.Port(), Priority: 30, Weight: 1},
			{Target: "a.srvonly.test.", Port: busyAddr.Port(), Priority: 10, Weight: 1},
			{Target: "b.srvonly.test.", Port: uint16(silentPort), Priority: 20, Weight: 1},
		}
		z.a["a.srvonly.test."] = []string{"127.0.0.3"}
		z.a["b.srvonly.test."] = []string{"127.0.0.4"}
		z.a["c.srvonly.test."] = []string{"127.0.0.2"}
	})
	m := startPBX(t, Trunk{Name: "carrier", Host: "srvonly.test", SRV: true, Username: testUser, Password: testPass,
		Register: true, Expiry: time.Minute, AutoIPs: true},
		Options{Resolver: z.resolver(), RegisterTimeout: time.Second, RetryMin: time.Hour})
	want := []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), busyAddr.Port()),
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.4"), uint16(silentPort)),
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), reg.addr.Port()),
	}
	waitFor(t, "discovery", func() bool { return slices.Equal(m.Destinations("carrier"), want) })
	waitFor(t, "registered at the third target", func() bool { return m.Status()[0].State == StateRegistered })
	if dst, ok := m.Destination("carrier"); !ok || dst != want[0] {
		t.Errorf("first destination %v %v, want %v", dst, ok, want[0])
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if len(reg.accepted) != 1 {
		t.Fatalf("%d registrations reached the working target", len(reg.accepted))
	}
	if got := reg.accepted[0].ruri; got != "sip:srvonly.test" {
		t.Errorf("Request-URI %s, want the domain without a port", got)
	}
}
