package web

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"pbx/appliance/config"
)

func TestSetCredentialsSwapsAndKeeps(t *testing.T) {
	e := newEnv(t)
	newSecret := "rotated-secret-0123456789abcdefghijklmnop"
	if err := e.srv.SetCredentials([]config.Token{{Name: "rotated", Token: config.Secret(newSecret), Scopes: []string{"status:read"}}}); err != nil {
		t.Fatal(err)
	}
	if r := e.get("/v1/status", newSecret); r.status != 200 {
		t.Fatalf("new token: %d", r.status)
	}
	if r := e.do(e.freshPeer(), "GET", "/v1/status", secretAdmin); r.status != 401 {
		t.Fatalf("old token after the swap: %d", r.status)
	}
	bad := map[string][]config.Token{
		"empty":         nil,
		"short":         {{Name: "x", Token: "short", Scopes: []string{"status:read"}}},
		"bad hash":      {{Name: "x", Hash: "sha256:abc", Scopes: []string{"status:read"}}},
		"md5":           {{Name: "x", Hash: "md5:" + strings.Repeat("a", 32), Scopes: []string{"status:read"}}},
		"both":          {{Name: "x", Token: config.Secret(secretAdmin), Hash: sha256Hash(secretAdmin), Scopes: []string{"status:read"}}},
		"neither":       {{Name: "x", Scopes: []string{"status:read"}}},
		"no name":       {{Token: config.Secret(secretAdmin), Scopes: []string{"status:read"}}},
		"no scope":      {{Name: "x", Token: config.Secret(secretAdmin)}},
		"unknown scope": {{Name: "x", Token: config.Secret(secretAdmin), Scopes: []string{"root"}}},
		"bad expiry":    {{Name: "x", Token: config.Secret(secretAdmin), Scopes: []string{"status:read"}, Expires: "tomorrow"}},
		"dup name": {
			{Name: "x", Token: config.Secret(secretAdmin), Scopes: []string{"status:read"}},
			{Name: "x", Token: config.Secret(secretAcme), Scopes: []string{"status:read"}},
		},
		"shared secret": {
			{Name: "x", Token: config.Secret(secretAdmin), Scopes: []string{"status:read"}},
			{Name: "y", Hash: sha256Hash(secretAdmin), Scopes: []string{"status:read"}},
		},
	}
	for name, set := range bad {
		err := e.srv.SetCredentials(set)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, s := range []string{secretAdmin, secretAcme} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: error reveals a secret: %v", name, err)
			}
		}
		if r := e.get("/v1/status", newSecret); r.status != 200 {
			t.Fatalf("%s: running set lost: %d", name, r.status)
		}
	}
	if strings.Contains(e.logs.String(), newSecret) {
		t.Fatal("secret in the log")
	}
}

func TestTokenExpiry(t *testing.T) {
	c := newClock() // 2026-11-21T12:00:00Z
	e := newEnv(t, withClock(c), func(a *config.API, _ *Options) {
		a.Tokens = []config.Token{
			{Name: "day", Token: "day-secret-0123456789abcdefghijklmnopqrst", Scopes: []string{"status:read"}, Expires: "2026-11-21"},
			{Name: "instant", Hash: sha256Hash("instant-secret-0123456789abcdefghijklmno"), Scopes: []string{"status:read"}, Expires: "2026-11-21T12:00:30Z"},
		}
	})
	ok := func(tok string, want int) {
		t.Helper()
		if r := e.do(e.freshPeer(), "GET", "/v1/status", tok); r.status != want {
			t.Fatalf("at %v: %d, want %d", c.now(), r.status, want)
		}
	}
	ok("instant-secret-0123456789abcdefghijklmno", 200)
	c.advance(30 * time.Second) // the expiry instant itself is past
	ok("instant-secret-0123456789abcdefghijklmno", 401)
	ok("day-secret-0123456789abcdefghijklmnopqrst", 200) // the whole day counts
	c.advance(12 * time.Hour)
	ok("day-secret-0123456789abcdefghijklmnopqrst", 401)
	if !strings.Contains(e.logs.String(), `"token":"day"`) {
		t.Fatal("expired token not logged by name")
	}
}

func TestAuthorizationHeaderForms(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		values []string
		want   int
	}{
		{"bearer", []string{"Bearer " + secretAdmin}, 200},
		{"lower-case scheme", []string{"bearer " + secretAdmin}, 200},
		{"basic", []string{"Basic " + secretAdmin}, 401},
		{"no scheme", []string{secretAdmin}, 401},
		{"empty bearer", []string{"Bearer "}, 401},
		{"two headers", []string{"Bearer " + secretAdmin, "Bearer " + secretAdmin}, 401},
		{"prefix of a token", []string{"Bearer " + secretAdmin[:32]}, 401},
		{"hash as token", []string{"Bearer " + sha256Hash(secretAcme)}, 401},
	}
	for _, c := range cases {
		var hdr []string
		for _, v := range c.values {
			hdr = append(hdr, "Authorization", v)
		}
		if r := e.do(e.freshPeer(), "GET", "/v1/status", "", hdr...); r.status != c.want {
			t.Errorf("%s: %d, want %d", c.name, r.status, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	set, err := compileCredentials(testTokens())
	if err != nil {
		t.Fatal(err)
	}
	if c := set.match(secretAcme); c == nil || c.principal.Name != "acme" {
		t.Fatalf("hashed token: %v", c)
	}
	if c := set.match(scopeSecret("operate")); c == nil || c.principal.Name != "only-operate" {
		t.Fatalf("last token: %v", c)
	}
	if set.match("") != nil || set.match(secretBad) != nil {
		t.Fatal("matched a wrong token")
	}
}

func TestListenAndRun(t *testing.T) {
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	cfg := config.API{Enabled: true, Tokens: testTokens()} // bindHost absent: loopback; bindPort absent: ephemeral
	s, err := New(Options{API: cfg}, log)
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != nil {
		t.Fatal("address before Listen")
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() || addr.Port == 0 {
		t.Fatalf("bound %v", addr)
	}
	if !strings.Contains(logs.String(), addr.String()) {
		t.Fatalf("startup line lacks the address: %s", logs)
	}
	// A second server on the same port fails at Listen, before readiness.
	cfg.BindPort = addr.Port
	s2, err := New(Options{API: cfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Listen(); err == nil {
		t.Fatal("second bind of one port succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e := &env{t: t, base: "http://" + addr.String(), client: &http.Client{Timeout: 10 * time.Second}}
	if r := e.get("/v1/health", ""); r.status != 200 {
		t.Fatalf("health: %d", r.status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if _, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		t.Fatal("still accepting after Run returned")
	}
}

func TestDisabledServesNothing(t *testing.T) {
	// A disabled block is not validated: no tokens is fine.
	s, err := New(Options{API: config.API{Enabled: false}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil || s.Addr() != nil {
		t.Fatalf("disabled: Listen %v, Addr %v", err, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{API: config.API{Enabled: true}}, nil); err == nil {
		t.Fatal("enabled with no tokens accepted")
	}
}
