package registrar

import (
	"fmt"
	"testing"
	"time"
)

// tenantDir serves acme.example as tenant acme and globex.example as
// globex, every user with password pw.
type tenantDir struct{}

func (tenantDir) ServesDomain(d string) bool { return d == "acme.example" || d == "globex.example" }
func (tenantDir) Account(d, u string) (Account, bool) {
	switch d {
	case "acme.example":
		return Account{Tenant: "acme", Username: u, Password: "pw", Extension: u}, true
	case "globex.example":
		return Account{Tenant: "globex", Username: u, Password: "pw", Extension: u}, true
	}
	return Account{}, false
}

// newTenantRegistrar returns a registrar without a store whose accounts
// are tenantDir's, and its digest authenticator.
func newTenantRegistrar(tb testing.TB) (*Registrar, *Auth) {
	tb.Helper()
	a, err := NewAuth(AuthOptions{}, tenantDir{})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := New(Options{Auth: a}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return r, a
}

func TestCountByTenantAndListOrder(t *testing.T) {
	r, a := newTenantRegistrar(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	nonce := a.newNonce("acme.example")
	// Registered out of order, two contacts for u1, one refreshed twice.
	for i, reg := range []struct {
		user string
		port int
	}{{"u3", 5060}, {"u1", 5062}, {"u2", 5060}, {"u1", 5061}, {"u1", 5062}, {"u1", 5062}} {
		if res := r.register(benchRegister(t, a, nonce, reg.user, reg.port, uint32(i+1))); res.StatusCode != 200 {
			t.Fatalf("register %s: status %d", reg.user, res.StatusCode)
		}
	}
	if got := r.CountByTenant(); len(got) != 1 || got["acme"] != 4 {
		t.Fatalf("CountByTenant = %v, want acme:4", got)
	}
	var order []string
	for _, b := range r.List() {
		order = append(order, b.Extension+" "+b.Contact)
	}
	want := []string{"u1 sip:u1@10.0.0.1:5061", "u1 sip:u1@10.0.0.1:5062", "u2 sip:u2@10.0.0.1:5060", "u3 sip:u3@10.0.0.1:5060"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("List order %q, want %q", order, want)
	}
	// Expired bindings are not counted.
	now = now.Add(time.Hour)
	if got := r.CountByTenant(); len(got) != 0 {
		t.Fatalf("CountByTenant after expiry = %v, want none", got)
	}
}

func TestCompareBindingsFieldByField(t *testing.T) {
	// "a" + "b" and "ab" + "" would tie as one concatenated string.
	x := Binding{Tenant: "t", Extension: "a", Username: "b"}
	y := Binding{Tenant: "t", Extension: "ab", Username: ""}
	if compareBindings(x, y) >= 0 || compareBindings(y, x) <= 0 {
		t.Fatalf("extension a must sort before ab whatever the usernames")
	}
	if compareBindings(x, x) != 0 {
		t.Fatal("a binding must equal itself")
	}
	z := Binding{Tenant: "s", Extension: "z"}
	if compareBindings(z, x) >= 0 {
		t.Fatal("tenant orders first")
	}
}

func TestDateCache(t *testing.T) {
	var c dateCache
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 100, time.FixedZone("x", 3600))
	if got, want := c.format(t0), "Mon, 23 Nov 2026 11:00:00 GMT"; got != want {
		t.Fatalf("format = %q, want %q", got, want)
	}
	if got := c.format(t0.Add(800 * time.Millisecond)); got != "Mon, 23 Nov 2026 11:00:00 GMT" {
		t.Fatalf("same second: %q", got)
	}
	if got := c.format(t0.Add(time.Second)); got != "Mon, 23 Nov 2026 11:00:01 GMT" {
		t.Fatalf("next second: %q", got)
	}
	if got := c.format(t0.Add(-time.Hour)); got != "Mon, 23 Nov 2026 10:00:00 GMT" {
		t.Fatalf("going back: %q", got)
	}
}
