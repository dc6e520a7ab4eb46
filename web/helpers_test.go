package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/sipcore/calls"
	"pbx/web/api"
)

// Secrets of the test tokens: 32 characters or more.
const (
	secretAdmin   = "admin-secret-0123456789abcdefghijklmnop"
	secretAcme    = "acme-secret-0123456789abcdefghijklmnopq"
	secretExpired = "expired-secret-0123456789abcdefghijklmn"
	secretBad     = "wrong-secret-0123456789abcdefghijklmnopq"
)

func scopeSecret(scope string) string {
	return "scope-" + strings.ReplaceAll(scope, ":", "-") + "-0123456789abcdefghijklmnopqrstuvwxyz"
}

func sha256Hash(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(d[:])
}

// testTokens: an admin with every scope, one token per scope, an
// acme-restricted token with every scope (given as a hash), an expired one.
func testTokens() []config.Token {
	ts := []config.Token{
		{Name: "admin", Token: config.Secret(secretAdmin), Scopes: config.Scopes},
		{Name: "acme", Hash: sha256Hash(secretAcme), Scopes: config.Scopes, Tenants: []string{"acme"}},
		{Name: "old", Token: config.Secret(secretExpired), Scopes: config.Scopes, Expires: "2020-01-01"},
	}
	for _, s := range config.Scopes {
		ts = append(ts, config.Token{Name: "only-" + s, Token: config.Secret(scopeSecret(s)), Scopes: []string{s}})
	}
	return ts
}

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fakes: in-memory components with two tenants, acme and globex.

type fakeStatus struct{}

func (fakeStatus) Status(context.Context) (api.StatusSnapshot, error) {
	return api.StatusSnapshot{
		Version:   "1.2.3",
		StartedAt: time.Now().Add(-time.Hour),
		Tenants: map[string]api.Counts{
			"acme":   {CallsActive: 1, Registrations: 2, TrunksUp: 1},
			"globex": {CallsActive: 10, Registrations: 20, TrunksDown: 1},
		},
		Shared: api.Counts{CallsActive: 100, Registrations: 200, TrunksUp: 1},
	}, nil
}

type fakeTenants struct{}

func (fakeTenants) Tenants(context.Context) ([]api.Tenant, error) {
	return []api.Tenant{
		{Name: "acme", Domain: "acme.example", Accounts: 2, Extensions: []string{"100"}},
		{Name: "globex", Domain: "globex.example", Accounts: 1},
	}, nil
}

type fakeTrunks struct{ refreshed atomic.Int32 }

func (*fakeTrunks) Trunks(context.Context) ([]api.Trunk, error) {
	return []api.Trunk{
		{Name: "acme-trunk", Tenant: "acme", Host: "sip.carrier.example", Port: 5060, Addresses: []string{"192.0.2.10"}},
		{Name: "globex-trunk", Tenant: "globex", Host: "sip.other.example", Port: 5060},
		{Name: "shared", Host: "sip.shared.example", Port: 5060},
	}, nil
}

func (f *fakeTrunks) Refresh(_ context.Context, name string) error {
	f.refreshed.Add(1)
	return nil
}

type fakeRegistrations struct{ dropped atomic.Int32 }

func (*fakeRegistrations) Registrations(context.Context) ([]api.Registration, error) {
	now := time.Now()
	return []api.Registration{
		{Tenant: "acme", Extension: "100", Username: "alice", Contact: "sip:alice@192.0.2.20", ExpiresAt: now.Add(time.Hour)},
		{Tenant: "acme", Extension: "101", Username: "bob"},
		{Tenant: "globex", Extension: "200", Username: "carol", Contact: "sip:carol@192.0.2.21", ExpiresAt: now.Add(time.Hour)},
	}, nil
}

func (f *fakeRegistrations) Drop(_ context.Context, tenant, ext string) error {
	if (tenant == "acme" && ext == "100") || (tenant == "globex" && ext == "200") {
		f.dropped.Add(1)
		return nil
	}
	return api.ErrNotFound
}

type fakeCalls struct{ hungUp atomic.Int32 }

func (*fakeCalls) Calls(context.Context) ([]api.Call, error) {
	return []api.Call{
		{ID: "call-acme", Tenant: "acme", Direction: "inbound", State: "answered"},
		{ID: "call-globex", Tenant: "globex", Direction: "outbound", State: "ringing"},
	}, nil
}

func (f *fakeCalls) Hangup(_ context.Context, id string) error {
	f.hungUp.Add(1)
	return nil
}

type fakeGuard struct{ lifted atomic.Int32 }

func (*fakeGuard) Bans(context.Context) ([]api.Ban, error) {
	return []api.Ban{{IP: "192.0.2.66", Reason: "auth failures", Offences: 1}}, nil
}

func (*fakeGuard) Counters(context.Context) (api.Counters, error) {
	return api.Counters{Packets: 42, BansActive: 1}, nil
}

func (f *fakeGuard) Lift(_ context.Context, ip netip.Addr) error {
	if ip == netip.MustParseAddr("192.0.2.66") {
		f.lifted.Add(1)
		return nil
	}
	return api.ErrNotFound
}

// env is a running server over a real listener with fakes and a real call
// log.
type env struct {
	t      testing.TB
	srv    *Server
	base   string
	logs   *logBuffer
	trunks *fakeTrunks
	regs   *fakeRegistrations
	calls  *fakeCalls
	guard  *fakeGuard
	store  *cdr.Store
	acmeID cdr.ID // a committed record of acme
	globID cdr.ID // a committed record of globex
	client *http.Client
	peer   atomic.Uint32 // last loopback host octet handed out
}

type envOption func(*config.API, *Options)

// newEnv starts a server with the per-token limit off unless an option
// turns it on.
func newEnv(t testing.TB, mods ...envOption) *env {
	t.Helper()
	e := &env{t: t, logs: &logBuffer{}, trunks: &fakeTrunks{}, regs: &fakeRegistrations{}, calls: &fakeCalls{}, guard: &fakeGuard{}}
	store, err := cdr.New(cdr.Options{DataDir: t.TempDir(), Location: func(string) *time.Location { return time.UTC }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for i := range 6 {
		for _, tenant := range []string{"acme", "globex"} {
			r := cdr.NewRecord(tenant, calls.DirectionInbound, base.Add(time.Duration(i)*time.Minute))
			r.From, r.To, r.DID = "+15551230"+string(rune('0'+i)), "100", "+15559990000"
			r.Finish(r.Start.Add(30*time.Second), calls.CauseNoAnswer, 487, "")
			if err := store.Commit(r); err != nil {
				t.Fatal(err)
			}
			if tenant == "acme" {
				e.acmeID = r.ID
			} else {
				e.globID = r.ID
			}
		}
	}
	cfg := config.API{
		Enabled:   true,
		BindHost:  "127.0.0.1",
		RateLimit: config.RateLimit{RequestsPerMinute: -1},
		Tokens:    testTokens(),
	}
	opts := Options{Backends: api.Backends{
		Status: fakeStatus{}, Tenants: fakeTenants{}, Trunks: e.trunks, Registrations: e.regs,
		Calls: e.calls, Guard: e.guard, CallLog: store,
	}}
	for _, m := range mods {
		m(&cfg, &opts)
	}
	opts.API = cfg
	level := slog.LevelDebug
	switch t.(type) {
	case *testing.B, *testing.F: // millions of requests: no access lines
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: level}))
	s, err := New(opts, log)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = s
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	e.base = scheme + "://" + s.Addr().String()
	e.client = &http.Client{Timeout: 10 * time.Second}
	return e
}

// from returns a client whose connections come from another loopback
// address, a distinct socket peer for the per-peer bucket.
func (e *env) from(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// freshPeer is a client from a loopback address no other request used.
func (e *env) freshPeer() *http.Client {
	n := e.peer.Add(1)
	return e.from(netip.AddrFrom4([4]byte{127, 1, byte(n >> 8), byte(n)}).String())
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

// errCode returns error.code of an envelope, "" when there is none.
func (r response) errCode() string {
	var env struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &env)
	return env.Error.Code
}

func (e *env) do(c *http.Client, method, path, token string, hdr ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = e.client
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) get(path, token string) response { return e.do(nil, http.MethodGet, path, token) }
