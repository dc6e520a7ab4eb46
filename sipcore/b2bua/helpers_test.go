package b2bua_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

const (
	domain = "acme.example"
	tenant = "acme"
	wait   = 15 * time.Second
)

type recorder struct {
	mu     sync.Mutex
	events []b2bua.Event
	onEv   func(b2bua.Event)
}

func (r *recorder) CallEvent(ev b2bua.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	f := r.onEv
	r.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

func (r *recorder) kinds() []b2bua.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []b2bua.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

// ended waits for the ended event and returns it.
func (r *recorder) ended(t *testing.T) b2bua.Event {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, e := range r.events {
			if e.Kind == b2bua.EventEnded {
				r.mu.Unlock()
				return e
			}
		}
		r.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no ended event; got %v", r.kinds())
	return b2bua.Event{}
}

type env struct {
	t     testing.TB
	srv   *sipcore.Server
	reg   *registrar.Registrar
	dir   *siptest.Directory
	calls *b2bua.Manager
	rec   *recorder
	media *rtpcore.Engine
	udp   netip.AddrPort
	tcp   netip.AddrPort
}

type envOpts struct {
	ringTimeout  time.Duration
	mediaTimeout time.Duration
	identify     b2bua.IdentifyFunc
	// onAuthSuccess is the manager's OnAuthSuccess hook.
	onAuthSuccess func(src netip.AddrPort, domain, username string) bool
	// minSE and sessionExpires are the manager's session timer settings.
	minSE, sessionExpires time.Duration
	// failoverAfter is the manager's FailoverAfter.
	failoverAfter time.Duration
	// moh is the manager's MusicOnHold.
	moh b2bua.MusicOnHold
	// route replaces the default router (extension -> its contacts).
	route func(in *b2bua.Inbound, reg *registrar.Registrar, srv *sipcore.Server) b2bua.Decision
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	dir := siptest.NewDirectory()
	dir.AddDomain(tenant, domain)
	for _, a := range []registrar.Account{
		{Username: "alice", Password: "alice-pw", Extension: "101", DisplayName: "Alice"},
		{Username: "bob", Password: "bob-pw", Extension: "102"},
		{Username: "carol", Password: "carol-pw", Extension: "103"},
	} {
		dir.AddAccount(domain, a)
	}
	srv, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{
		{ID: "udp", Transport: "udp", BindHost: "127.0.0.1"},
		{ID: "tcp", Transport: "tcp", BindHost: "127.0.0.1"},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := registrar.NewAuth(registrar.AuthOptions{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registrar.New(registrar.Options{Auth: auth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(sip.REGISTER, reg.HandleRegister)
	media, err := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1"), PortMin: 42000, PortMax: 44999, Quarantine: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ring := o.ringTimeout
	if ring == 0 {
		ring = 10 * time.Second
	}
	router := b2bua.RouterFunc(func(ctx context.Context, in *b2bua.Inbound) b2bua.Decision {
		if o.route != nil {
			return o.route(in, reg, srv)
		}
		ext := in.RequestURI.User
		if _, ok := dir.AccountByExtension(in.Caller.Tenant, ext); !ok {
			return b2bua.Decision{Reject: &b2bua.Rejection{Status: 404, Cause: calls.CauseNoRoute}}
		}
		legs := b2bua.LegsFor(reg.Lookup(in.Caller.Tenant, ext), srv.ConnectionOpen, ext, ext)
		user := in.Caller.Extension
		if user == "" {
			user = in.From.User
		}
		return b2bua.Decision{Target: &b2bua.Target{
			Legs: legs, RingTimeout: ring,
			CallerID: b2bua.Identity{User: user, DisplayName: in.Caller.DisplayName},
			Meta:     b2bua.Meta{Tenant: in.Caller.Tenant, Direction: calls.DirectionInternal, Extension: ext, Domain: domain},
		}}
	})
	calls, err := b2bua.New(b2bua.Options{SIP: srv, Media: media, Auth: auth, Router: router, Observer: rec, MediaTimeout: o.mediaTimeout, Identify: o.identify,
		OnAuthSuccess: o.onAuthSuccess, MinSE: o.minSE, SessionExpires: o.sessionExpires, FailoverAfter: o.failoverAfter, MusicOnHold: o.moh}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		if err := calls.Close(cctx); err != nil {
			t.Errorf("close calls: %v", err)
		}
		cancel()
		<-done
		srv.Close()
		media.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	e := &env{t: t, srv: srv, reg: reg, dir: dir, calls: calls, rec: rec, media: media}
	e.udp, _ = srv.Addr("udp")
	e.tcp, _ = srv.Addr("tcp")
	return e
}

func (e *env) phone(transport, user, pw string, codecs ...uint8) *siptest.Phone {
	pbx := e.udp
	if transport == "tcp" {
		pbx = e.tcp
	}
	p := siptest.NewPhone(e.t, siptest.Options{Transport: transport, Username: user, Password: pw, Domain: domain, PBX: pbx, Codecs: codecs})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p.MustRegister(ctx, 600)
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func waitCh(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timeout waiting for %s", what)
	}
}

// answered dials target from caller, waits for callee's incoming call and for
// the call to be answered (200 to the caller, ACKed at the callee).
func answered(t *testing.T, caller, callee *siptest.Phone, target string) (call, in *siptest.Call) {
	t.Helper()
	call = caller.Dial(ctxT(t), target)
	in = callee.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d, want 200", s)
	}
	waitCh(t, in.Answered(), "callee answered")
	return call, in
}

func final(t *testing.T, c *siptest.Call) int {
	t.Helper()
	waitCh(t, c.Done(), "final response")
	s, _ := c.Final()
	return s
}

// exchange sends n packets from a to b through the PBX and checks that b
// received them with the same sequence numbers and payloads.
func exchange(t *testing.T, from, to *siptest.Media, n int, tag string) {
	t.Helper()
	before := len(to.Received())
	sent := map[uint16][]byte{}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range n {
		payload := bytes.Repeat([]byte(fmt.Sprintf("%s%03d", tag, i)), 20)
		seq, err := from.Send(payload)
		if err != nil {
			t.Fatal(err)
		}
		sent[seq] = payload
		if i%10 == 9 {
			// Let the relay catch up under CPU contention without a sleep.
			if _, err := to.WaitReceived(ctx, before+i/2); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := to.WaitReceived(ctx, before+n)
	if err != nil {
		t.Fatal(err)
	}
	matched := 0
	for _, p := range got[before:] {
		want, ok := sent[p.SequenceNumber]
		if !ok {
			t.Fatalf("received unexpected seq %d", p.SequenceNumber)
		}
		if !bytes.Equal(p.Payload, want) {
			t.Fatalf("seq %d payload %q, want %q", p.SequenceNumber, p.Payload, want)
		}
		matched++
	}
	if matched != n {
		t.Fatalf("matched %d of %d packets", matched, n)
	}
}

// rawUAS is a misbehaving contact: it rings, and on CANCEL answers 200 to
// the CANCEL and then 200 OK to the INVITE instead of 487.
type rawUAS struct {
	conn *net.UDPConn
	got  chan string // methods received after the late 200
}

func newRawUAS(t *testing.T) *rawUAS {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	u := &rawUAS{conn: c, got: make(chan string, 16)}
	go u.loop()
	return u
}

func (u *rawUAS) addr() netip.AddrPort { return u.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (u *rawUAS) loop() {
	buf := make([]byte, 8192)
	var invite *sip.Request
	for {
		n, from, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		m, err := sip.ParseMessage(append([]byte(nil), buf[:n]...))
		if err != nil {
			continue
		}
		req, ok := m.(*sip.Request)
		if !ok {
			continue
		}
		send := func(r *sip.Response) { _, _ = u.conn.WriteToUDPAddrPort([]byte(r.String()), from) }
		switch req.Method {
		case sip.INVITE:
			invite = req.Clone()
			invite.To().Params.Add("tag", "rawtag")
			send(sip.NewResponseFromRequest(invite, 180, "Ringing", nil))
		case sip.CANCEL:
			send(sip.NewResponseFromRequest(req, 200, "OK", nil))
			if invite != nil {
				ok := sip.NewResponseFromRequest(invite, 200, "OK", siptest.BuildSDP(4000, []uint8{0}, "sendrecv"))
				ok.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
				ok.AppendHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "raw", Host: "127.0.0.1", Port: int(u.addr().Port())}})
				send(ok)
			}
		case sip.ACK:
			u.got <- "ACK"
		case sip.BYE:
			send(sip.NewResponseFromRequest(req, 200, "OK", nil))
			u.got <- "BYE"
		}
	}
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testLog logs warnings of the code under test into the test's output.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// noDialogsLeft waits until the manager's dialog table is empty.
func (e *env) noDialogsLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for b2bua.DialogCount(e.calls) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d dialogs left in the manager", b2bua.DialogCount(e.calls))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
