package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"pbx/appliance/config"
	"pbx/web/api"
)

// minPlaintext is the shortest plaintext token accepted.
const minPlaintext = 32

// credential is one configured operator token.
type credential struct {
	digest    [sha256.Size]byte
	expires   time.Time // zero: never
	principal *api.Principal
}

// credentialSet is an immutable set of operator tokens.
type credentialSet struct {
	creds []credential
}

// compileCredentials checks tokens and turns them into a credential set.
// It refuses the same things the configuration validator does, so that a
// set handed over without validation cannot weaken the running one.
func compileCredentials(tokens []config.Token) (*credentialSet, error) {
	if len(tokens) == 0 {
		return nil, errors.New("no api tokens")
	}
	set := &credentialSet{creds: make([]credential, 0, len(tokens))}
	var errs []error
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]bool{}
	for i, t := range tokens {
		where := fmt.Sprintf("api.tokens[%d]", i)
		if t.Name != "" {
			where = fmt.Sprintf("api.tokens[%d] (%s)", i, t.Name)
		}
		c, err := compileToken(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if names[t.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate name", where))
			continue
		}
		if digests[c.digest] {
			errs = append(errs, fmt.Errorf("%s: shares its secret with another token", where))
			continue
		}
		names[t.Name], digests[c.digest] = true, true
		set.creds = append(set.creds, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return set, nil
}

func compileToken(t config.Token) (credential, error) {
	var c credential
	if t.Name == "" {
		return c, errors.New("no name")
	}
	plain, hash := t.Token.Reveal(), t.Hash
	switch {
	case plain != "" && hash != "":
		return c, errors.New("both token and hash are set")
	case plain != "":
		if len(plain) < minPlaintext {
			return c, fmt.Errorf("plaintext token shorter than %d characters", minPlaintext)
		}
		c.digest = sha256.Sum256([]byte(plain))
	case hash != "":
		hexDigest, ok := strings.CutPrefix(hash, "sha256:")
		b, err := hex.DecodeString(hexDigest)
		if !ok || err != nil || len(b) != sha256.Size {
			return c, errors.New("hash is not sha256: followed by 64 hex characters")
		}
		copy(c.digest[:], b)
	default:
		return c, errors.New("neither token nor hash is set")
	}
	if len(t.Scopes) == 0 {
		return c, errors.New("no scopes")
	}
	for _, s := range t.Scopes {
		if !slices.Contains(config.Scopes, s) {
			return c, fmt.Errorf("unknown scope %q", s)
		}
	}
	if t.Expires != "" {
		exp, err := config.ParseExpires(t.Expires)
		if err != nil {
			return c, fmt.Errorf("expires %q: not YYYY-MM-DD or RFC 3339", t.Expires)
		}
		c.expires = exp
	}
	c.principal = &api.Principal{
		Name:    t.Name,
		Scopes:  slices.Clone(t.Scopes),
		Tenants: slices.Clone(t.Tenants),
	}
	return c, nil
}

// match returns the credential whose secret is presented, or nil. It
// hashes the presented token and compares the digest with every configured
// one in constant time, visiting all of them whatever matches.
func (s *credentialSet) match(presented string) *credential {
	d := sha256.Sum256([]byte(presented))
	found := -1
	for i := range s.creds {
		eq := subtle.ConstantTimeCompare(d[:], s.creds[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return nil
	}
	return &s.creds[found]
}

// names lists the token names of the set.
func (s *credentialSet) names() map[string]bool {
	m := make(map[string]bool, len(s.creds))
	for _, c := range s.creds {
		m[c.principal.Name] = true
	}
	return m
}
