package registrar

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
)

// Account is what the Directory knows about a SIP user.
type Account struct {
	Tenant      string // opaque tenant id
	Username    string
	Password    string
	Extension   string
	DisplayName string
	MaxContacts int // 0 means Options.DefaultMaxContacts
}

// LogValue keeps the password out of logs.
func (a Account) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("tenant", a.Tenant),
		slog.String("username", a.Username),
		slog.String("extension", a.Extension),
		slog.String("password", "[redacted]"),
	)
}

// Directory resolves credentials. Implementations must be safe for concurrent
// use and quick (they run on the SIP handler path).
type Directory interface {
	// ServesDomain reports whether domain is a SIP domain of some tenant.
	ServesDomain(domain string) bool
	// Account returns the account username in domain.
	Account(domain, username string) (Account, bool)
}

// Defaults of AuthOptions.
const (
	// DefaultNonceTTL is how long a nonce may be reused (with a rising
	// nc). Asterisk uses 32 s. The replay table holds every nonce used
	// within the TTL (at 16,000 REGISTER/s, 480,000 entries at 30 s), and
	// its memory returns only once they expire: with a minute, half of a
	// load's nonces were still tracked 30 s after it ended and the process
	// held 2.5 times its idle memory; with 30 s the table is empty then.
	// Clients re-register every few minutes at least, so a longer TTL
	// saves them no challenge.
	DefaultNonceTTL = 30 * time.Second
	// DefaultMaxTrackedNonces bounds the replay table; past it a nonce
	// cannot be reused and the client is challenged afresh (stale=true).
	DefaultMaxTrackedNonces = 1 << 20
)

// DefaultAlgorithms is the default AuthOptions.Algorithms.
var DefaultAlgorithms = []string{AlgMD5}

// AuthOptions configures Auth.
type AuthOptions struct {
	// NonceTTL is how long a nonce is accepted; later the client gets a
	// stale=true challenge. Default DefaultNonceTTL.
	NonceTTL time.Duration
	// Secret keys the nonce MAC. Empty means 32 random bytes (nonces do not
	// survive a restart, which only costs clients one more challenge).
	Secret []byte
	// Algorithms are the digest algorithms offered (AlgMD5, AlgSHA256), one
	// challenge header each, in this order; a response is accepted for any
	// of them and refused for any other. Default DefaultAlgorithms: some
	// stock clients (baresip 1.0) give up on a second challenge header, so
	// like Asterisk and Kamailio only MD5 is offered unless asked.
	Algorithms []string
	// MaxTrackedNonces bounds the nc replay table; default
	// DefaultMaxTrackedNonces.
	MaxTrackedNonces int
	// Now is the clock; default time.Now. The sweep timer calls it from
	// its own goroutine: it must be safe for concurrent use.
	Now func() time.Time
}

// Outcome of checking a request's credentials.
type Outcome int

const (
	// Challenged: no usable credentials (none, another realm, unknown or
	// expired nonce); answer with a challenge.
	Challenged Outcome = iota
	// Authorized: the credentials are valid; Result.Account is set.
	Authorized
	// Rejected: credentials were presented and are wrong (or name no
	// account); answer 403. This is an authentication failure.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Authorized:
		return "authorized"
	case Rejected:
		return "rejected"
	}
	return "challenged"
}

// Result of Auth.Check.
type Result struct {
	Outcome  Outcome
	Account  Account // set when Authorized
	Username string  // the username the client claimed, if any
	Stale    bool    // challenge with stale=true
}

// Auth issues digest challenges and verifies credentials for REGISTER
// (401/WWW-Authenticate/Authorization) and INVITE and others
// (407/Proxy-Authenticate/Proxy-Authorization).
type Auth struct {
	dir    Directory
	ttl    time.Duration
	secret []byte
	algs   []string // offered, in challenge order; upper case
	now    func() time.Time

	replay *replayTable // the last nc of each nonce in use (replay.go)

	// macs reuses the nonce HMACs (keyed with secret): one is computed
	// for every challenge and every credential checked.
	macs sync.Pool
}

// dummyPassword is hashed for unknown users so that a wrong password and an
// unknown user cost the same.
const dummyPassword = "\x00unknown-account\x00"

// NewAuth returns an Auth resolving accounts through dir.
func NewAuth(opts AuthOptions, dir Directory) (*Auth, error) {
	if dir == nil {
		return nil, fmt.Errorf("%w: nil directory", ErrInvalidOptions)
	}
	a := &Auth{dir: dir, ttl: opts.NonceTTL, secret: opts.Secret, now: opts.Now}
	algs := opts.Algorithms
	if len(algs) == 0 {
		algs = DefaultAlgorithms
	}
	for _, alg := range algs {
		alg = strings.ToUpper(alg)
		if _, ok := newHash(alg); !ok || alg == "" {
			return nil, fmt.Errorf("%w: unknown digest algorithm %q", ErrInvalidOptions, alg)
		}
		if slices.Contains(a.algs, alg) {
			return nil, fmt.Errorf("%w: digest algorithm %q listed twice", ErrInvalidOptions, alg)
		}
		a.algs = append(a.algs, alg)
	}
	tracked := opts.MaxTrackedNonces
	if tracked <= 0 {
		tracked = DefaultMaxTrackedNonces
	}
	if a.ttl <= 0 {
		a.ttl = DefaultNonceTTL
	}
	if len(a.secret) == 0 {
		a.secret = make([]byte, 32)
		if _, err := rand.Read(a.secret); err != nil {
			return nil, fmt.Errorf("nonce secret: %w", err)
		}
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.replay = newReplayTable(a.ttl, tracked, a.now)
	return a, nil
}

// Directory returns the directory the Auth resolves accounts with.
func (a *Auth) Directory() Directory { return a.dir }

// nonce layout before base64url: 8 bytes unix seconds, 8 random, 16 MAC.
const nonceRaw = 32

func (a *Auth) newNonce(realm string) string {
	var b [nonceRaw]byte
	binary.BigEndian.PutUint64(b[:8], uint64(a.now().Unix()))
	_, _ = rand.Read(b[8:16])
	a.mac(b[:16], realm, b[16:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// macState is a nonce HMAC with the scratch space it hashes from: the
// text and the sum go through the hash.Hash interface, so buffers of
// their own would be allocated for every nonce.
type macState struct {
	h    hash.Hash
	text []byte
	sum  [sha256.Size]byte
}

func (a *Auth) mac(prefix []byte, realm string, out []byte) {
	m, _ := a.macs.Get().(*macState)
	if m == nil {
		m = &macState{h: hmac.New(sha256.New, a.secret), text: make([]byte, 0, 128)}
	} else {
		m.h.Reset()
	}
	defer a.macs.Put(m)
	m.text = append(m.text[:0], prefix...)
	if !isASCII(realm) {
		realm = strings.ToLower(realm)
	}
	for i := 0; i < len(realm); i++ { // lower-cased as strings.ToLower does ASCII
		c := realm[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		m.text = append(m.text, c)
	}
	if len(m.text) > 1024 {
		defer func() { m.text = make([]byte, 0, 128) }() // not kept at that size
	}
	m.h.Write(m.text)
	copy(out, m.h.Sum(m.sum[:0])[:16])
}

// hexEqualFold reports in constant time (for equal lengths) whether got is
// the lower-case hex digest want in any case, as comparing want with
// strings.ToLower(got) does.
func hexEqualFold(want []byte, got string) bool {
	if len(want) != len(got) {
		return false
	}
	var diff byte
	for i := range want {
		c := got[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		diff |= want[i] ^ c
	}
	return subtle.ConstantTimeByteEq(diff, 0) == 1
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// checkNonce reports whether nonce was issued by this Auth for realm, when
// it expires, and its replay-table key.
func (a *Auth) checkNonce(nonce, realm string) (valid bool, expires time.Time, key nonceKey) {
	if len(nonce) != base64.RawURLEncoding.EncodedLen(nonceRaw) {
		return false, time.Time{}, key
	}
	var b [nonceRaw]byte
	if n, err := base64.RawURLEncoding.Decode(b[:], []byte(nonce)); err != nil || n != nonceRaw {
		return false, time.Time{}, key
	}
	var want [16]byte
	a.mac(b[:16], realm, want[:])
	if !hmac.Equal(want[:], b[16:]) {
		return false, time.Time{}, key
	}
	copy(key[:], b[16:16+len(key)])
	issued := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0)
	return true, issued.Add(a.ttl), key
}

// Check verifies the credentials of req for realm. proxy selects
// Proxy-Authorization (INVITE and other requests) instead of Authorization
// (REGISTER).
func (a *Auth) Check(req *sip.Request, proxy bool, realm string) Result {
	name := "Authorization"
	if proxy {
		name = "Proxy-Authorization"
	}
	var cred Credentials
	var err error
	found := false
	for _, h := range req.Headers() { // no list of them to allocate
		if !strings.EqualFold(h.Name(), name) {
			continue
		}
		c, perr := ParseCredentials(h.Value())
		if perr != nil {
			err = perr
			continue
		}
		if strings.EqualFold(c.Realm, realm) {
			cred, found = c, true
			break
		}
	}
	if !found {
		if err != nil {
			return Result{Outcome: Rejected}
		}
		// Credentials for another realm: offer ours.
		return Result{Outcome: Challenged}
	}
	// A copy: the parsed value is a slice of the whole header, and hooks
	// may keep the name (the guard counts failures per account).
	res := Result{Username: strings.Clone(cred.Username)}
	valid, expires, key := a.checkNonce(cred.Nonce, realm)
	if !valid {
		res.Outcome = Challenged
		return res
	}
	now := a.now()
	if !now.Before(expires) {
		res.Outcome, res.Stale = Challenged, true
		return res
	}
	alg := strings.ToUpper(cred.Algorithm)
	if alg == "" {
		alg = AlgMD5
	}
	if !slices.Contains(a.algs, alg) {
		// Not offered (RFC 8760 section 2.4: only a challenged algorithm).
		res.Outcome = Rejected
		return res
	}
	qop := strings.ToLower(cred.QOP)
	if qop != "" && qop != "auth" {
		res.Outcome = Rejected
		return res
	}
	if qop == "auth" && (!cred.hasNC || cred.Cnonce == "") {
		res.Outcome = Rejected
		return res
	}
	uriOK := URIMatches(cred.URI, req.Recipient)

	acct, ok := a.dir.Account(strings.ToLower(realm), cred.Username)
	password := acct.Password
	if !ok {
		password = dummyPassword
	}
	var digest [2 * sha256.Size]byte
	want, _ := digestResponse(&digest, alg, cred.Username, cred.Realm, password, req.Method.String(), cred.URI, cred.Nonce, qop, cred.NC, cred.Cnonce)
	match := hexEqualFold(want, cred.Response)
	if !ok || !match || !uriOK {
		res.Outcome = Rejected
		return res
	}
	if !a.useNonce(key, qop != "", cred.NC, expires, now) {
		// Replayed nc: make the client start over with a fresh nonce.
		res.Outcome, res.Stale = Challenged, true
		return res
	}
	res.Outcome = Authorized
	res.Account = acct
	return res
}

// useNonce records the nonce count; it fails for a count not above the last
// one seen (a replay), and when the table is full. Without qop a nonce is
// single use.
func (a *Auth) useNonce(key nonceKey, hasQOP bool, nc uint32, expires, now time.Time) bool {
	if !hasQOP {
		nc = 1
	}
	return a.replay.use(key, nc, expires, now)
}

// uriBufs hold the Request-URI's text while URIMatches compares it (its
// String grows a builder for every authenticated request).
var uriBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// URIMatches reports whether the digest uri names the request's
// Request-URI: the same text, or the same scheme, user, host and port.
func URIMatches(digestURI string, reqURI sip.Uri) bool {
	buf := uriBufs.Get().(*bytes.Buffer)
	buf.Reset()
	reqURI.StringWrite(buf)
	text := buf.Bytes()
	same := digestURI == string(text) // compared, not copied
	if buf.Cap() <= 4096 {
		uriBufs.Put(buf)
	}
	if same {
		return true
	}
	var u sip.Uri
	if err := sip.ParseUri(digestURI, &u); err != nil {
		return false
	}
	port := func(p int) int {
		if p == 0 {
			return 5060
		}
		return p
	}
	return strings.EqualFold(u.Scheme, reqURI.Scheme) && u.User == reqURI.User &&
		strings.EqualFold(u.Host, reqURI.Host) && port(u.Port) == port(reqURI.Port)
}

// challengeValue formats one challenge header value.
func challengeValue(realm, nonce, alg string, stale bool) string {
	var b strings.Builder
	b.Grow(128)
	b.WriteString(`Digest realm="`)
	b.WriteString(quoteEscape(realm))
	b.WriteString(`", nonce="`)
	b.WriteString(nonce)
	b.WriteString(`", algorithm=`)
	b.WriteString(alg)
	b.WriteString(`, qop="auth"`)
	if stale {
		b.WriteString(`, stale=true`)
	}
	return b.String()
}

func quoteEscape(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return r.Replace(s)
}

// Response builds the answer for a result that is not Authorized: a 401 or
// 407 challenge (one header per offered algorithm, in the configured order,
// RFC 8760 section 2.4), or 403 for Rejected. The
// answers for an unknown user, an unknown domain and a wrong password are
// identical apart from nonce and tags.
func (a *Auth) Response(req *sip.Request, res Result, proxy bool, realm string) *sip.Response {
	if res.Outcome == Rejected {
		return sipcore.NewResponse(req, sip.StatusForbidden, "Forbidden")
	}
	code, reason, hname := sip.StatusUnauthorized, "Unauthorized", "WWW-Authenticate"
	if proxy {
		code, reason, hname = sip.StatusProxyAuthRequired, "Proxy Authentication Required", "Proxy-Authenticate"
	}
	r := sipcore.NewResponse(req, code, reason)
	nonce := a.newNonce(realm)
	for _, alg := range a.algs {
		r.AppendHeader(sip.NewHeader(hname, challengeValue(realm, nonce, alg, res.Stale)))
	}
	return r
}

// NonceCount returns how many nonces are tracked for nc replay (for tests
// and metrics).
func (a *Auth) NonceCount() int { return a.replay.count() }

// AuthHooks are told of the outcome of Authenticate (the guard's hooks).
type AuthHooks struct {
	// OnFailure, when set, is called when credentials were presented and
	// are wrong. It must be quick.
	OnFailure func(src netip.AddrPort, domain, username string)
	// OnSuccess, when set, is called when the credentials are valid; false
	// refuses the request with 403 Forbidden. It must be quick.
	OnSuccess func(src netip.AddrPort, domain, username string) bool
}

// Authenticate checks req's credentials for realm the way REGISTER does
// (proxy false: 401 and Authorization) or other requests through a proxy
// (407 and Proxy-Authorization), and tells hooks. It returns the account,
// or the response to send instead: a challenge, or 403 for wrong
// credentials and for an account the OnSuccess hook refuses.
func (a *Auth) Authenticate(req *sip.Request, proxy bool, realm string, hooks AuthHooks) (Account, *sip.Response) {
	ar := a.Check(req, proxy, realm)
	src, _ := netip.ParseAddrPort(req.Source())
	if ar.Outcome != Authorized {
		if ar.Outcome == Rejected && hooks.OnFailure != nil {
			hooks.OnFailure(src, realm, ar.Username)
		}
		return Account{}, a.Response(req, ar, proxy, realm)
	}
	if hooks.OnSuccess != nil && !hooks.OnSuccess(src, realm, ar.Username) {
		return Account{}, sipcore.NewResponse(req, sip.StatusForbidden, "Forbidden")
	}
	return ar.Account, nil
}
