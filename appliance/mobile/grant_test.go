package mobile

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestGrantSingleUse: a grant works once, for its own destination, within
// its 60 seconds; a second use, an unknown token, another number or a late
// use are refused with ErrGrant, and a bad use spends the grant too.
func TestGrantSingleUse(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := NewGrants(clock)

	tok, g := s.Mint(Grant{Tenant: "demo", Account: "alice", DeviceID: "d1", To: "102"})
	if len(tok) != 43 || g.Expires != now.Add(GrantTTL) {
		t.Fatalf("token %q (want 32 random bytes, base64url), expires %v", tok, g.Expires)
	}
	got, err := s.Use(tok, "102")
	if err != nil || got.Account != "alice" || got.DeviceID != "d1" || got.Tenant != "demo" {
		t.Fatalf("first use: %+v %v", got, err)
	}
	if _, err := s.Use(tok, "102"); !errors.Is(err, ErrGrant) {
		t.Fatalf("replay: %v, want ErrGrant", err)
	}
	if _, err := s.Use("", "102"); !errors.Is(err, ErrGrant) {
		t.Fatalf("missing: %v", err)
	}

	other, _ := s.Mint(Grant{Account: "alice", To: "102"})
	if _, err := s.Use(other, "103"); !errors.Is(err, ErrGrant) {
		t.Fatalf("other destination: %v", err)
	}
	if _, err := s.Use(other, "102"); !errors.Is(err, ErrGrant) {
		t.Fatalf("a grant tried for another number must be spent: %v", err)
	}

	late, _ := s.Mint(Grant{Account: "alice", To: "102"})
	advance(GrantTTL - time.Millisecond)
	ok, _ := s.Mint(Grant{Account: "alice", To: "102"})
	advance(time.Millisecond)
	if _, err := s.Use(late, "102"); !errors.Is(err, ErrGrant) {
		t.Fatalf("expired: %v", err)
	}
	if _, err := s.Use(ok, "102"); err != nil {
		t.Fatalf("grant 1 ms short of its age: %v", err)
	}
	// A restart is a new store: no grant of the old one is known.
	kept, _ := s.Mint(Grant{Account: "alice", To: "102"})
	if _, err := NewGrants(clock).Use(kept, "102"); !errors.Is(err, ErrGrant) {
		t.Fatalf("after restart: %v", err)
	}
	// Expired grants are swept when new ones are minted.
	advance(2 * GrantTTL)
	s.Mint(Grant{To: "1"})
	if n := s.Len(); n != 1 {
		t.Fatalf("%d grants held, want the expired ones swept", n)
	}
}

// TestDialable: numbers, extensions and feature codes pass; URIs, spaces
// and header-breaking characters do not.
func TestDialable(t *testing.T) {
	for _, s := range []string{"102", "+15550100", "*97", "0044-20"} {
		if !dialable(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{"", "a@b", "1 2", "1\r\n", "sip:1", string(make([]byte, 65))} {
		if dialable(s) {
			t.Errorf("%q accepted", s)
		}
	}
}
