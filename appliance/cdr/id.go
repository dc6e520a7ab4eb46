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
	if !validIDTime(s) {
		return fmt.Errorf("%w: %q", ErrID, s)
	}
	return nil
}

// validIDTime reports whether the timestamp of s, whose digits and
// separators Validate has checked against idTimeLayout, is a date and
// time time.Parse accepts (month 1-12, a day of that month, hour 0-23,
// minute and second 0-59): what a parse checked, without its cost (every
// call's record is validated twice, at its answer and at its end: a
// parse each was about 2 us a call in the pbx at 500 calls/s, perf).
func validIDTime(s string) bool {
	num := func(i, n int) int {
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(4, 2), num(6, 2)
	if month < 1 || month > 12 || day < 1 || num(9, 2) > 23 || num(11, 2) > 59 || num(13, 2) > 59 {
		return false
	}
	days := [13]int{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[month]
	if month == 2 && year%4 == 0 && (year%100 != 0 || year%400 == 0) {
		days = 29
	}
	return day <= days
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
