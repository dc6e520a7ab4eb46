package db

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"

	"pbx/sipcore/registrar"
)

// appendBinding appends the JSON encoding/json gives b (the stored form of
// a registration) to dst, without reflection: the write-behind encodes
// every refreshed binding once a second, and encoding/json was a fifth of
// that cost (BenchmarkSaveBindings). TestAppendBindingMatchesEncodingJSON
// holds the two to the same bytes.
func appendBinding(dst []byte, b registrar.Binding) ([]byte, error) {
	dst = append(dst, `{"tenant":`...)
	dst = appendJSONString(dst, b.Tenant)
	dst = append(dst, `,"username":`...)
	dst = appendJSONString(dst, b.Username)
	dst = append(dst, `,"extension":`...)
	dst = appendJSONString(dst, b.Extension)
	dst = append(dst, `,"domain":`...)
	dst = appendJSONString(dst, b.Domain)
	dst = append(dst, `,"contact":`...)
	dst = appendJSONString(dst, b.Contact)
	if b.InstanceID != "" {
		dst = append(dst, `,"instance":`...)
		dst = appendJSONString(dst, b.InstanceID)
	}
	if b.Q != "" {
		dst = append(dst, `,"q":`...)
		dst = appendJSONString(dst, b.Q)
	}
	dst = append(dst, `,"source":`...)
	dst = appendJSONAddrPort(dst, b.Source)
	dst = append(dst, `,"transport":`...)
	dst = appendJSONString(dst, b.Transport)
	dst = append(dst, `,"local":`...)
	dst = appendJSONAddrPort(dst, b.Local)
	dst = append(dst, `,"call_id":`...)
	dst = appendJSONString(dst, b.CallID)
	dst = append(dst, `,"cseq":`...)
	dst = strconv.AppendUint(dst, uint64(b.CSeq), 10)
	if b.UserAgent != "" {
		dst = append(dst, `,"user_agent":`...)
		dst = appendJSONString(dst, b.UserAgent)
	}
	var err error
	for _, f := range []struct {
		name string
		t    time.Time
	}{{`,"since":`, b.Since}, {`,"updated":`, b.Updated}, {`,"expires":`, b.Expires}} {
		dst = append(dst, f.name...)
		if dst, err = appendJSONTime(dst, f.t); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// appendJSONTime appends t as time.Time's MarshalJSON writes it.
func appendJSONTime(dst []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		// MarshalJSON's own error for a time it cannot write.
		_, err := t.MarshalJSON()
		return nil, err
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), nil
}

// appendJSONAddrPort appends a as its MarshalText writes it, quoted ("" for
// the zero AddrPort).
func appendJSONAddrPort(dst []byte, a netip.AddrPort) []byte {
	var buf [64]byte
	txt, _ := a.AppendText(buf[:0]) // never fails
	return appendJSONString(dst, string(txt))
}

// appendJSONString appends s quoted. Text of printable ASCII other than
// the characters encoding/json escapes (quote, backslash, and <, > and &
// for HTML) is copied; anything else goes through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
