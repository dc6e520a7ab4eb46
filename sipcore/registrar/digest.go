package registrar

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// maxCredentialsLen bounds the Authorization header the parser accepts.
const maxCredentialsLen = 4096

// Credentials is a parsed Digest Authorization or Proxy-Authorization value.
type Credentials struct {
	Username  string
	Realm     string
	Nonce     string
	URI       string
	Response  string
	Algorithm string // "" or "MD5", "SHA-256"
	Cnonce    string
	QOP       string // "" or "auth"
	NC        uint32 // nonce count, 0 when absent
	hasNC     bool
	Opaque    string
}

// ParseCredentials parses a Digest credentials header value
// (`Digest username="a", realm="b", ...`). Unknown parameters are ignored;
// a repeated parameter, an unterminated quoted string or a bad nc is an
// error wrapping ErrMalformedCredentials. Values without escapes are slices
// of v, not copies.
func ParseCredentials(v string) (Credentials, error) {
	var c Credentials
	if len(v) > maxCredentialsLen {
		return c, fmt.Errorf("%w: header too long", ErrMalformedCredentials)
	}
	v = strings.TrimLeft(v, " \t")
	if len(v) < 7 || !strings.EqualFold(v[:6], "digest") || (v[6] != ' ' && v[6] != '\t') {
		return c, fmt.Errorf("%w: not a digest scheme", ErrMalformedCredentials)
	}
	rest := v[7:]
	seen := 0
	for {
		rest = strings.TrimLeft(rest, " \t\r\n,")
		if rest == "" {
			break
		}
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return c, fmt.Errorf("%w: parameter without value", ErrMalformedCredentials)
		}
		key := strings.ToLower(strings.TrimRight(rest[:eq], " \t"))
		if strings.ContainsAny(key, " \t,\"") {
			return c, fmt.Errorf("%w: bad parameter name", ErrMalformedCredentials)
		}
		rest = strings.TrimLeft(rest[eq+1:], " \t")
		var val string
		if q := quotedEnd(rest); q > 0 {
			// No escapes: the value is a slice of the header, no copy.
			val = rest[1:q]
			rest = rest[q+1:]
		} else if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			closed := false
			for i < len(rest) {
				ch := rest[i]
				if ch == '\\' && i+1 < len(rest) {
					b.WriteByte(rest[i+1])
					i += 2
					continue
				}
				if ch == '"' {
					closed = true
					i++
					break
				}
				b.WriteByte(ch)
				i++
			}
			if !closed {
				return c, fmt.Errorf("%w: unterminated quoted string", ErrMalformedCredentials)
			}
			val = b.String()
			rest = rest[i:]
		} else {
			end := strings.IndexAny(rest, ", \t")
			if end < 0 {
				end = len(rest)
			}
			val = rest[:end]
			rest = rest[end:]
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest != "" && rest[0] != ',' {
			return c, fmt.Errorf("%w: missing comma after %s", ErrMalformedCredentials, key)
		}
		bit := 0
		switch key {
		case "username":
			c.Username, bit = val, 1
		case "realm":
			c.Realm, bit = val, 2
		case "nonce":
			c.Nonce, bit = val, 4
		case "uri":
			c.URI, bit = val, 8
		case "response":
			c.Response, bit = val, 16
		case "algorithm":
			c.Algorithm, bit = val, 32
		case "cnonce":
			c.Cnonce, bit = val, 64
		case "qop":
			c.QOP, bit = val, 128
		case "nc":
			n, err := strconv.ParseUint(val, 16, 32)
			if err != nil || len(val) > 8 {
				return c, fmt.Errorf("%w: bad nc", ErrMalformedCredentials)
			}
			c.NC, c.hasNC, bit = uint32(n), true, 256
		case "opaque":
			c.Opaque, bit = val, 512
		}
		if bit != 0 {
			if seen&bit != 0 {
				return c, fmt.Errorf("%w: repeated parameter %s", ErrMalformedCredentials, key)
			}
			seen |= bit
		}
	}
	if c.Username == "" || c.Nonce == "" || c.Response == "" || c.URI == "" {
		return c, fmt.Errorf("%w: missing username, nonce, uri or response", ErrMalformedCredentials)
	}
	return c, nil
}

// quotedEnd returns the index of the closing quote of the quoted string
// rest starts with when it holds no backslash before it, else 0.
func quotedEnd(rest string) int {
	if !strings.HasPrefix(rest, `"`) {
		return 0
	}
	for i := 1; i < len(rest); i++ {
		switch rest[i] {
		case '"':
			return i
		case '\\':
			return 0
		}
	}
	return 0
}

// Algorithm names.
const (
	AlgMD5    = "MD5"
	AlgSHA256 = "SHA-256"
)

func newHash(alg string) (hash.Hash, bool) {
	switch strings.ToUpper(alg) {
	case "", AlgMD5:
		return md5.New(), true
	case AlgSHA256:
		return sha256.New(), true
	}
	return nil, false
}

// DigestResponse computes the expected response (RFC 2617 / RFC 7616 with
// qop=auth, or without qop) as lower-case hex.
func DigestResponse(alg, username, realm, password, method, uri, nonce, qop string, nc uint32, cnonce string) (string, bool) {
	var out [2 * sha256.Size]byte
	b, ok := digestResponse(&out, alg, username, realm, password, method, uri, nonce, qop, nc, cnonce)
	return string(b), ok
}

// digestResponse is DigestResponse written into out (no string for the
// check of every authenticated request to allocate).
func digestResponse(out *[2 * sha256.Size]byte, alg, username, realm, password, method, uri, nonce, qop string, nc uint32, cnonce string) ([]byte, bool) {
	sha := false
	switch strings.ToUpper(alg) {
	case "", AlgMD5:
	case AlgSHA256:
		sha = true
	default:
		return nil, false
	}
	// The hashed texts are joined in one buffer and the hex digests kept in
	// arrays, hashed by the package functions (no hash.Hash interface for
	// the buffers to escape through): this runs for every authenticated
	// request.
	var buf [512]byte
	var ha1, ha2 [2 * sha256.Size]byte
	a1 := hexDigest(&ha1, sha, join(buf[:0], username, realm, password))
	a2 := hexDigest(&ha2, sha, join(buf[:0], method, uri))
	b := append(append(append(buf[:0], a1...), ':'), nonce...)
	if qop != "" {
		b = append(b, ':')
		b = appendHex8(b, nc)
		b = append(append(append(append(b, ':'), cnonce...), ':'), qop...)
	}
	b = append(append(b, ':'), a2...)
	return hexDigest(out, sha, b), true
}

// hexDigest writes the MD5 or SHA-256 of text to dst in lower-case hex and
// returns that part of dst.
func hexDigest(dst *[2 * sha256.Size]byte, sha bool, text []byte) []byte {
	if sha {
		sum := sha256.Sum256(text)
		return dst[:hex.Encode(dst[:], sum[:])]
	}
	sum := md5.Sum(text)
	return dst[:hex.Encode(dst[:], sum[:])]
}

// join appends parts to b separated by colons.
func join(b []byte, parts ...string) []byte {
	for i, p := range parts {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, p...)
	}
	return b
}

// appendHex8 appends n as eight lower-case hex digits (the nc of RFC 2617).
func appendHex8(b []byte, n uint32) []byte {
	const digits = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, digits[(n>>uint(shift))&0xf])
	}
	return b
}
