package mobile

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"sync"
	"time"
)

// GrantTTL is the life of a call grant: single use, in memory only.
const GrantTTL = 60 * time.Second

// Grant is what a call grant proves: a live app session of Account asked
// to call To from Room less than GrantTTL ago.
type Grant struct {
	Tenant    string
	Account   string
	Extension string
	DeviceID  string
	To        string
	Room      string
	Expires   time.Time
}

// Grants holds the live call grants of this process. A restart loses them
// all, which invalidates every grant (the specification's rule).
type Grants struct {
	mu  sync.Mutex
	m   map[string]Grant
	now func() time.Time
	ttl time.Duration
}

// NewGrants returns an empty store; now nil means time.Now.
func NewGrants(now func() time.Time) *Grants {
	if now == nil {
		now = time.Now
	}
	return &Grants{m: map[string]Grant{}, now: now, ttl: GrantTTL}
}

// Mint stores g (its Expires set to now plus GrantTTL, or the service's
// Options.GrantTTL) under a fresh
// random token and returns the token.
func (s *Grants) Mint(g Grant) (string, Grant) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	g.Expires = now.Add(s.ttl)
	s.sweep(now)
	s.m[tok] = g
	return tok, g
}

// Use consumes the grant tok for a call to to: it returns the grant when
// it exists, has not expired and names to. Any use, good or bad, ends the
// grant, so a token is never tried twice. Errors wrap ErrGrant.
func (s *Grants) Use(tok, to string) (Grant, error) {
	if tok == "" {
		return Grant{}, fmt.Errorf("%w: missing", ErrGrant)
	}
	s.mu.Lock()
	g, ok := s.m[tok]
	delete(s.m, tok)
	now := s.now()
	s.mu.Unlock()
	switch {
	case !ok:
		return Grant{}, fmt.Errorf("%w: unknown or already used", ErrGrant)
	case !now.Before(g.Expires):
		return Grant{}, fmt.Errorf("%w: expired", ErrGrant)
	case subtle.ConstantTimeCompare([]byte(g.To), []byte(to)) != 1:
		return Grant{}, fmt.Errorf("%w: granted for another destination", ErrGrant)
	}
	return g, nil
}

// Len is the number of grants held (expired ones included until swept).
func (s *Grants) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// sweep drops expired grants; called with s.mu held.
func (s *Grants) sweep(now time.Time) {
	for k, g := range s.m {
		if !now.Before(g.Expires) {
			delete(s.m, k)
		}
	}
}
