package cdr

import (
	"crypto/rand"
	"fmt"
	"time"
)

// ID identifies a call record: "<UTC timestamp>-<suffix>", for example
// 20261121T151230.123Z-k3j9q2ab. Ids sort by time as strings, contain no
// colons and are safe as file names.
type ID string

const (
	idTimeLayout = "20060102T150405.000Z"
	idTimeLen    = len(idTimeLayout)
	idSuffixLen  = 8
	idSuffixMax  = 32
	idAlphabet   = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// NewID returns a fresh id for a call that started at t. The suffix is eight
// characters from crypto/rand.
func NewID(t time.Time) ID {
	var raw [idSuffixLen]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand panics on failure)
	b := make([]byte, 0, idTimeLen+1+idSuffixLen)
	b = t.UTC().AppendFormat(b, idTimeLayout)
	b = append(b, '-')
	for _, r := range raw {
		// 252 = 7*36: reject nothing, the tiny modulo bias is irrelevant
		// for an identifier that only has to be unique.
		b = append(b, idAlphabet[int(r)%len(idAlphabet)])
	}
	return ID(b)
}

// Time is the timestamp embedded in the id.
func (id ID) Time() (time.Time, error) {
	if err := id.Validate(); err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(idTimeLayout, string(id[:idTimeLen]))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %q", ErrID, string(id))
	}
	return t, nil
}

// Validate checks the form <timestamp>-<suffix>, the suffix being 1 to 32
// characters of [a-z0-9]. A valid id is a safe path element.
func (id ID) Validate() error {
	s := string(id)
	if len(s) < idTimeLen+2 || len(s) > idTimeLen+1+idSuffixMax || s[idTimeLen] != '-' {
		return fmt.Errorf("%w: %q", ErrID, s)
	}
	for i := 0; i < idTimeLen; i++ {
		c, l := s[i], idTimeLayout[i]
		switch {
		case l >= '0' && l <= '9':
			if c < '0' || c > '9' {
				return fmt.Errorf("%w: %q", ErrID, s)
			}
		case c != l:
			return fmt.Errorf("%w: %q", ErrID, s)
		}
	}
	for i := idTimeLen + 1; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return fmt.Errorf("%w: %q", ErrID, s)
		}
	}
	if _, err := time.Parse(idTimeLayout, s[:idTimeLen]); err != nil {
		return fmt.Errorf("%w: %q", ErrID, s)
	}
	return nil
}

// ValidateTenant checks that a tenant name is usable as one path element:
// 1 to 128 characters of [A-Za-z0-9._-], not starting with a dot.
func ValidateTenant(tenant string) error {
	if tenant == "" || len(tenant) > 128 || tenant[0] == '.' {
		return fmt.Errorf("%w: %q", ErrTenant, tenant)
	}
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q", ErrTenant, tenant)
		}
	}
	return nil
}
