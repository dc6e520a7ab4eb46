package mobile

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/db"
)

// dirMap is a configuration's accounts: domain "acme.test" is tenant acme.
type dirMap map[string]Account // tenant/username

func (m dirMap) Account(domain, username string) (Account, bool) {
	for _, a := range m {
		if a.Domain == domain && a.Username == username {
			return a, true
		}
	}
	return Account{}, false
}

func (m dirMap) ByName(tenant, username string) (Account, bool) {
	a, ok := m[tenant+"/"+username]
	return a, ok
}

func testDir() dirMap {
	return dirMap{
		"acme/alice":   {Tenant: "acme", Username: "alice", Password: "alice-pw", Extension: "100", DisplayName: "Alice", Domain: "acme.test"},
		"acme/bob":     {Tenant: "acme", Username: "bob", Password: "bob-pw", Extension: "101", Domain: "acme.test"},
		"globex/carol": {Tenant: "globex", Username: "carol", Password: "carol-pw", Extension: "100", Domain: "globex.test"},
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	dir   string
	db    *db.DB
	s     *Sessions
	clock *clock
	fails []string
}

func openSessions(t testing.TB, dataDir string, d Directory, c *clock) *fixture {
	t.Helper()
	bdb, err := db.Open(dataDir, db.Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{dir: dataDir, db: bdb, clock: c}
	var mu sync.Mutex
	s, err := NewSessions(SessionOptions{Store: bdb.Devices(), Directory: d, Now: c.now,
		OnAuthFailure: func(src netip.AddrPort, domain, username string) {
			mu.Lock()
			f.fails = append(f.fails, src.Addr().String()+" "+domain+" "+username)
			mu.Unlock()
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	return f
}

func newFixture(t testing.TB) *fixture {
	f := openSessions(t, t.TempDir(), testDir(), &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)})
	t.Cleanup(func() { _ = f.db.Close() })
	return f
}

var src = netip.MustParseAddrPort("192.0.2.10:40000")

func login(user, pw, dev string) Login {
	domain := "acme.test"
	if user == "carol" {
		domain = "globex.test"
	}
	return Login{Domain: domain, Username: user, Password: pw,
		Device: LoginDevice{ID: dev, Platform: "ios", Push: json.RawMessage(`{"apns":"tok-1"}`)}}
}

func TestLoginIssuesOpaqueTokenStoredAsDigest(t *testing.T) {
	f := newFixture(t)
	is, err := f.s.Login(src, login("alice", "alice-pw", "phone-1"))
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := strings.CutPrefix(is.Token, TokenPrefix)
	if !ok {
		t.Fatalf("token %q lacks the prefix", is.Token)
	}
	if b, err := base64.RawURLEncoding.DecodeString(raw); err != nil || len(b) != 32 {
		t.Fatalf("token body: %d bytes, %v", len(b), err)
	}
	if want := time.Date(2026, 12, 23, 12, 0, 0, 0, time.UTC); !is.Session.ExpiresAt.Equal(want) {
		t.Fatalf("expires %s, want %s", is.Session.ExpiresAt, want)
	}
	se, ok := f.s.Lookup(is.Token)
	if !ok || se.Device.Extension != "100" || se.Device.Tenant != "acme" || string(se.Device.Push) != `{"apns":"tok-1"}` {
		t.Fatalf("lookup: %+v %v", se, ok)
	}
	// The database file holds the digest, never the token or the password.
	_ = f.db.Close()
	file, err := os.ReadFile(filepath.Join(f.dir, db.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(file), raw) || strings.Contains(string(file), "alice-pw") {
		t.Fatal("token or password stored in clear")
	}
	if !strings.Contains(string(file), HashToken(is.Token)) {
		t.Fatal("token digest not stored")
	}
}

func TestNewLoginReplacesDeviceSession(t *testing.T) {
	f := newFixture(t)
	first, _ := f.s.Login(src, login("alice", "alice-pw", "phone-1"))
	second, err := f.s.Login(src, login("alice", "alice-pw", "phone-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.s.Lookup(first.Token); ok {
		t.Fatal("the replaced session's token still works")
	}
	if _, ok := f.s.Lookup(second.Token); !ok {
		t.Fatal("new token refused")
	}
	_, _ = f.s.Login(src, login("alice", "alice-pw", "tablet"))
	if n := len(f.s.Devices("acme", "100")); n != 2 {
		t.Fatalf("%d devices, want 2", n)
	}
	if n := len(f.s.Devices("globex", "100")); n != 0 {
		t.Fatalf("another tenant's extension has %d devices", n)
	}
}

func TestRefreshRevokesOldAtOnce(t *testing.T) {
	f := newFixture(t)
	is, _ := f.s.Login(src, login("alice", "alice-pw", "phone-1"))
	f.clock.add(24 * time.Hour)
	nw, err := f.s.Refresh(is.Token)
	if err != nil {
		t.Fatal(err)
	}
	if nw.Token == is.Token {
		t.Fatal("refresh kept the token")
	}
	if _, ok := f.s.Lookup(is.Token); ok {
		t.Fatal("old token works after refresh")
	}
	if _, err := f.s.Refresh(is.Token); !errors.Is(err, ErrNoSession) {
		t.Fatalf("refresh with the old token: %v", err)
	}
	if !nw.Session.ExpiresAt.Equal(f.clock.now().Add(SessionLifetime)) {
		t.Fatalf("refreshed expiry %s", nw.Session.ExpiresAt)
	}
	// Expired: neither lookup nor refresh.
	f.clock.add(SessionLifetime)
	if _, ok := f.s.Lookup(nw.Token); ok {
		t.Fatal("expired token works")
	}
	if _, err := f.s.Refresh(nw.Token); !errors.Is(err, ErrNoSession) {
		t.Fatalf("refresh of an expired token: %v", err)
	}
}

func TestLogoutAndRevoke(t *testing.T) {
	f := newFixture(t)
	a, _ := f.s.Login(src, login("alice", "alice-pw", "phone-1"))
	b, _ := f.s.Login(src, login("bob", "bob-pw", "phone-2"))
	if err := f.s.Logout(a.Token); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.s.Lookup(a.Token); ok {
		t.Fatal("token works after logout")
	}
	if err := f.s.Revoke("globex", "phone-2"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("revoke in another tenant: %v", err)
	}
	if err := f.s.Revoke("acme", "phone-2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.s.Lookup(b.Token); ok {
		t.Fatal("token works after revoke")
	}
	if l, _ := f.s.List(); len(l) != 0 {
		t.Fatalf("%d sessions left", len(l))
	}
}

func TestFailedLoginsIdenticalAndBucketed(t *testing.T) {
	f := newFixture(t)
	_, e1 := f.s.Login(src, login("alice", "wrong", "d"))
	_, e2 := f.s.Login(src, login("nobody", "wrong", "d"))
	if !errors.Is(e1, ErrInvalidCredentials) || e1 != e2 {
		t.Fatalf("wrong password %v, unknown user %v", e1, e2)
	}
	if len(f.fails) != 2 || f.fails[0] != "192.0.2.10 acme.test alice" {
		t.Fatalf("guard told %q", f.fails)
	}
	// Per account: 5 failures in 15 minutes, whatever the source.
	for i := 1; i < 5; i++ {
		s := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 1)
		if _, err := f.s.Login(s, login("alice", "wrong", "d")); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	_, err := f.s.Login(netip.MustParseAddrPort("203.0.113.9:1"), login("alice", "alice-pw", "d"))
	var rl *RateLimitedError
	if !errors.As(err, &rl) || rl.Bucket != "account" || rl.Wait <= 0 || rl.Wait > 15*time.Minute {
		t.Fatalf("sixth attempt: %v", err)
	}
	// Bob is not locked by alice's failures.
	if _, err := f.s.Login(netip.MustParseAddrPort("203.0.113.9:1"), login("bob", "bob-pw", "d")); err != nil {
		t.Fatalf("bob: %v", err)
	}
	f.clock.add(15 * time.Minute)
	if _, err := f.s.Login(src, login("alice", "alice-pw", "d")); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	// Per source: 20 a minute across accounts.
	other := netip.MustParseAddrPort("192.0.2.77:5")
	for i := range 20 {
		u := []string{"u1", "u2", "u3", "u4"}[i%4]
		if _, err := f.s.Login(other, login(u, "x", "d")); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("source failure %d: %v", i, err)
		}
	}
	if _, err := f.s.Login(other, login("bob", "bob-pw", "d")); !errors.As(err, &rl) || rl.Bucket != "source" || rl.Wait > time.Minute {
		t.Fatalf("21st from one source: %v", err)
	}
}

func TestRestartInvalidatesChangedAccounts(t *testing.T) {
	dataDir := t.TempDir()
	c := &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	f := openSessions(t, dataDir, testDir(), c)
	alice, _ := f.s.Login(src, login("alice", "alice-pw", "p1"))
	bob, _ := f.s.Login(src, login("bob", "bob-pw", "p2"))
	carol, _ := f.s.Login(src, login("carol", "carol-pw", "p3"))
	_ = f.db.Close()

	d := testDir()
	a := d["acme/alice"]
	a.Password = "new-pw"
	d["acme/alice"] = a
	delete(d, "acme/bob")
	g := openSessions(t, dataDir, d, c)
	defer g.db.Close()
	if _, ok := g.s.Lookup(alice.Token); ok {
		t.Fatal("session survived a password change")
	}
	if _, ok := g.s.Lookup(bob.Token); ok {
		t.Fatal("session survived its account's removal")
	}
	if _, ok := g.s.Lookup(carol.Token); !ok {
		t.Fatal("an unchanged account lost its session")
	}
}

func TestValidation(t *testing.T) {
	f := newFixture(t)
	for _, mod := range []func(*Login){
		func(l *Login) { l.Domain = "" },
		func(l *Login) { l.Username = "" },
		func(l *Login) { l.Password = "" },
		func(l *Login) { l.Device.ID = "" },
		func(l *Login) { l.Device.ID = "a/b" },
		func(l *Login) { l.Device.ID = strings.Repeat("x", 129) },
		func(l *Login) { l.Device.Platform = "windows" },
		func(l *Login) { l.Device.Push = json.RawMessage(`[1]`) },
		func(l *Login) { l.Device.Push = json.RawMessage(`"s"`) },
	} {
		l := login("alice", "alice-pw", "d")
		mod(&l)
		if _, err := f.s.Login(src, l); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: %v", l, err)
		}
	}
	if len(f.fails) != 0 {
		t.Fatal("a malformed request was counted as an authentication failure")
	}
}

// BenchmarkLogin: successful logins (bbolt with fsync, as installed),
// with their p99.
func BenchmarkLogin(b *testing.B) {
	bdb, err := db.Open(b.TempDir(), db.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	s, err := NewSessions(SessionOptions{Store: bdb.Devices(), Directory: testDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if _, err := s.Login(src, login("alice", "alice-pw", "phone-"+strconv.Itoa(i%50))); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64(len(lat))/time.Since(start).Seconds(), "logins/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
