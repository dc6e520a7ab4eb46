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
// error wrapping ErrMalformedCredentials.
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
		if strings.HasPrefix(rest, `"`) {
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
	h, ok := newHash(alg)
	if !ok {
		return "", false
	}
	var sum [64]byte
	hexOf := func(parts ...string) string {
		h.Reset()
		for i, p := range parts {
			if i > 0 {
				h.Write([]byte{':'})
			}
			h.Write([]byte(p))
		}
		return hex.EncodeToString(h.Sum(sum[:0]))
	}
	ha1 := hexOf(username, realm, password)
	ha2 := hexOf(method, uri)
	if qop == "" {
		return hexOf(ha1, nonce, ha2), true
	}
	return hexOf(ha1, nonce, fmt.Sprintf("%08x", nc), cnonce, qop, ha2), true
}
