package api

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Query is a parsed query string: each accepted parameter at most once.
type Query map[string]string

// Limits of the query string.
const (
	maxQueryLen   = 4096
	maxValueLen   = 512
	maxQueryPairs = 32
)

// ParseQuery reads a raw query string strictly: every key must be in
// accepted (an unknown key names the accepted set), none may repeat or be
// empty, and it must be well-formed percent-encoding.
func ParseQuery(raw string, accepted []string) (Query, error) {
	q := Query{}
	if raw == "" {
		return q, nil
	}
	if len(raw) > maxQueryLen {
		return nil, Invalid("query string longer than %d bytes", maxQueryLen)
	}
	pairs := 0
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		if pairs++; pairs > maxQueryPairs {
			return nil, Invalid("more than %d query parameters", maxQueryPairs)
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, Invalid("malformed query string")
		}
		if !slices.Contains(accepted, key) {
			return nil, unknownParam(key, accepted)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, Invalid("%s: malformed percent-encoding", key)
		}
		if _, dup := q[key]; dup {
			return nil, Invalid("%s: given more than once", key)
		}
		if val == "" {
			return nil, Invalid("%s: empty value", key)
		}
		if len(val) > maxValueLen {
			return nil, Invalid("%s: longer than %d bytes", key, maxValueLen)
		}
		q[key] = val
	}
	return q, nil
}

func unknownParam(key string, accepted []string) *Error {
	if len(accepted) == 0 {
		return Invalid("unknown query parameter %q: this route accepts none", clip(key))
	}
	return Invalid("unknown query parameter %q: accepted are %s", clip(key), strings.Join(accepted, ", "))
}

// clip shortens an echoed client value.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Time reads an RFC 3339 parameter; nil when absent.
func (q Query) Time(key string) (*time.Time, error) {
	v, ok := q[key]
	if !ok {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		hint := ""
		if strings.Contains(v, " ") {
			hint = " (a + in the offset must be sent as %2B)"
		}
		return nil, Invalid("%s: %q is not an RFC 3339 time%s", key, clip(v), hint)
	}
	return &t, nil
}

// Bool reads a true/false parameter; nil when absent.
func (q Query) Bool(key string) (*bool, error) {
	v, ok := q[key]
	if !ok {
		return nil, nil
	}
	switch v {
	case "true":
		b := true
		return &b, nil
	case "false":
		b := false
		return &b, nil
	}
	return nil, Invalid("%s: %q is neither true nor false", key, clip(v))
}

// Limit reads the page size: def when absent, 1 to max otherwise.
func (q Query) Limit(def, max int) (int, error) {
	v, ok := q["limit"]
	if !ok {
		return def, nil
	}
	bad := Invalid("limit: %q is not an integer from 1 to %d", clip(v), max)
	if len(v) > 7 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, bad
	}
	return n, nil
}

// OneOf reads a parameter that must be one of allowed; "" when absent.
func (q Query) OneOf(key string, allowed ...string) (string, error) {
	v, ok := q[key]
	if !ok {
		return "", nil
	}
	if !slices.Contains(allowed, v) {
		return "", Invalid("%s: %q is not one of %s", key, clip(v), strings.Join(allowed, ", "))
	}
	return v, nil
}

// String returns a parameter or "".
func (q Query) String(key string) string { return q[key] }
