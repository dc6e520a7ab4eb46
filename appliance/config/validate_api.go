package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Scopes are the operator token scopes.
var Scopes = []string{"status:read", "cdr:read", "recordings:read", "voicemail:read", "voicemail:delete", "security:read", "mobile:read", "mobile:manage", "operate"}

var hashRE = regexp.MustCompile(`^sha256:[0-9a-fA-F]{64}$`)

// api checks the api block when the API is enabled: its bind address and TLS,
// rate limit, CORS origins and recordings options, then its tokens.
func (v *validator) api(m *Meta, a *API) {
	if len(a.Tokens) == 0 {
		v.errf(m, "api.tokens", "api.noTokens", "the API is enabled with no tokens; add at least one under api.tokens")
	}
	if !isLoopbackHost(a.BindHost) && a.TLS == nil {
		v.errf(m, "api.bindHost", "api.wideBind", "bindHost %q is not loopback, so api.tls is required (certFile and keyFile)", a.BindHost)
	}
	if a.BindHost != "" && net.ParseIP(a.BindHost) == nil && a.BindHost != "localhost" {
		v.errf(m, "api.bindHost", "api.bindHost", "%q is not an IP address", a.BindHost)
	}
	if a.TLS != nil {
		if a.TLS.CertFile == "" && len(a.TLS.Certificates) == 0 {
			v.errf(m, "api.tls", "api.tlsCertificate", "api.tls needs a certificate: certFile and keyFile, or certificates")
		}
		v.tls(m, "api.tls", a.TLS)
	}
	v.port(m, "api.bindPort", "api.bindPort", a.BindPort, true)
	if !m.Has("api.bindPort") || a.BindPort == 0 {
		v.warnf(m, "api.bindPort", "pitfall.bindPort", "bindPort is absent or zero: the API binds an ephemeral port, shown only in the startup log line")
	}
	if m.Has("api.rateLimit.burst") && !m.Has("api.rateLimit.requestsPerMinute") {
		v.warnf(m, "api.rateLimit.burst", "pitfall.burst", "burst is ignored unless requestsPerMinute is also set: the default 300/60 pair stays")
	}
	if a.RateLimit.RequestsPerMinute < 0 {
		v.warnf(m, "api.rateLimit.requestsPerMinute", "pitfall.rateNegative", "a negative requestsPerMinute disables the per-token rate limiter")
	}
	for i, o := range a.CORS.AllowedOrigins {
		p := fmt.Sprintf("api.cors.allowedOrigins[%d]", i)
		u, err := url.Parse(o)
		if o == "*" || strings.Contains(o, "*") {
			v.errf(m, p, "api.corsOrigin", "origins are exact strings; wildcards are not accepted")
		} else if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			v.errf(m, p, "api.corsOrigin", "%q is not an origin such as https://admin.example.com", o)
		}
	}
	if a.Recordings.Presign {
		v.warnf(m, "api.recordings.presign", "inert.presign", "presign is on: every recording audio request answers 500 (no fallback to streaming)")
	}
	if m.Has("api.recordings.presignTtl") {
		v.warnf(m, "api.recordings.presignTtl", "inert.presignTtl", "presignTtl is accepted but has no effect")
	}
	v.apiTokens(m, a.Tokens)
}

// apiTokens checks api.tokens: a name used once, exactly one of token and
// hash, a secret no other token shares, known scopes and tenants, a valid
// expiry.
func (v *validator) apiTokens(m *Meta, tokens []Token) {
	names := map[string]int{}
	secrets := map[string]int{}
	for i, t := range tokens {
		p := fmt.Sprintf("api.tokens[%d]", i)
		if t.Name == "" {
			v.errf(m, p, "token.name", "a token needs a name (it is what logs show)")
		} else if j, ok := names[t.Name]; ok {
			v.errf(m, p+".name", "token.nameDuplicate", "token name %q is already used by api.tokens[%d]", t.Name, j)
		} else {
			names[t.Name] = i
		}
		var digest string
		switch {
		case t.Token != "" && t.Hash != "":
			v.errf(m, p, "token.secret", "set exactly one of token and hash, not both")
		case t.Token == "" && t.Hash == "":
			v.errf(m, p, "token.secret", "set exactly one of token and hash")
		case t.Hash != "":
			if !hashRE.MatchString(t.Hash) {
				v.errf(m, p+".hash", "token.hash", "hash must be sha256: followed by 64 hex characters (pbxctl token hash makes one)")
			} else {
				digest = strings.ToLower(strings.TrimPrefix(t.Hash, "sha256:"))
			}
		default:
			if len(t.Token) < 32 {
				v.errf(m, p+".token", "token.short", "a plaintext token must be at least 32 characters (it has %d)", len(t.Token))
			}
			sum := sha256.Sum256([]byte(t.Token))
			digest = hex.EncodeToString(sum[:])
		}
		if digest != "" {
			if j, ok := secrets[digest]; ok {
				v.errf(m, p, "token.shared", "shares its secret with api.tokens[%d]; every token needs its own", j)
			} else {
				secrets[digest] = i
			}
		}
		if len(t.Scopes) == 0 {
			v.errf(m, p+".scopes", "token.scopes", "a token needs at least one scope (%s)", strings.Join(Scopes, ", "))
		}
		for j, sc := range t.Scopes {
			if !contains(Scopes, sc) {
				v.errf(m, fmt.Sprintf("%s.scopes[%d]", p, j), "token.scope", "unknown scope %q%s", sc, suggest(sc, Scopes))
			}
		}
		for j, tn := range t.Tenants {
			if _, ok := v.tenants[tn]; !ok {
				v.errf(m, fmt.Sprintf("%s.tenants[%d]", p, j), "token.tenant", "unknown tenant %q%s", tn, suggestFrom(tn, v.tenantNames(), "tenants"))
			}
		}
		if t.Expires != "" {
			if _, err := ParseExpires(t.Expires); err != nil {
				v.errf(m, p+".expires", "token.expires", "expires %q is neither YYYY-MM-DD nor an RFC 3339 timestamp", t.Expires)
			}
		}
	}
}

// ParseExpires reads a token's expires value: YYYY-MM-DD (the end of that day,
// UTC) or an RFC 3339 timestamp.
func ParseExpires(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, err
	}
	return d.Add(24*time.Hour - time.Nanosecond), nil
}

// isLoopbackHost reports whether h is localhost or a loopback address.
func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
