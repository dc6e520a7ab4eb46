package mobile

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"pbx/db"
)

// Device session rules (DESIGN.md 5.3).
const (
	// TokenPrefix starts every device token.
	TokenPrefix = "pbxd_"
	// SessionLifetime is how long a device token is valid; a refresh
	// starts a new one.
	SessionLifetime = 30 * 24 * time.Hour
	// tokenBytes is the token's random part, before base64url.
	tokenBytes = 32
	// MaxPushBytes bounds the push registration object.
	MaxPushBytes = 4096
	// MaxDeviceID bounds a device id.
	MaxDeviceID = 128
)

// Platforms of a device.
const (
	PlatformIOS     = "ios"
	PlatformAndroid = "android"
)

// Errors of the device sessions.
var (
	// ErrInvalidCredentials is the one answer to an unknown user and to a
	// wrong password.
	ErrInvalidCredentials = errors.New("invalid credentials")
	// ErrNoSession is returned for a token that names no live session.
	ErrNoSession = errors.New("no such device session")
	// ErrInvalidRequest wraps what is wrong with a request's fields.
	ErrInvalidRequest = errors.New("invalid request")
)

// RateLimitedError is a login refused because a failure bucket is empty.
type RateLimitedError struct {
	// Wait is how long until the bucket admits another attempt.
	Wait time.Duration
	// Bucket names the bucket: "account" or "source".
	Bucket string
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many failed logins for this %s; retry in %s", e.Bucket, e.Wait.Round(time.Second))
}

// Account is what the sessions need of a configured SIP account.
type Account struct {
	Tenant      string
	Username    string
	Password    string
	Extension   string
	DisplayName string
	Domain      string
}

// Directory finds configured accounts.
type Directory interface {
	// Account finds an account by its tenant's SIP domain and username.
	Account(domain, username string) (Account, bool)
	// ByName finds an account by tenant name and username.
	ByName(tenant, username string) (Account, bool)
}

// Session is a live device session (never its token).
type Session struct {
	Device    Device
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Issued is a session with the token just made for it: the only moment
// the token exists in clear.
type Issued struct {
	Token   string
	Session Session
}

// LoginDevice is the device part of a login.
type LoginDevice struct {
	ID       string          `json:"id"`
	Platform string          `json:"platform"`
	Push     json.RawMessage `json:"push"`
}

// Login is a login request's body.
type Login struct {
	Domain   string      `json:"domain"`
	Username string      `json:"username"`
	Password string      `json:"password"`
	Device   LoginDevice `json:"device"`
}

// Validate checks the fields of a login, naming the first bad one.
func (l *Login) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	switch {
	case l.Domain == "" || len(l.Domain) > 255:
		return bad("domain: required, at most 255 bytes")
	case l.Username == "" || len(l.Username) > 255:
		return bad("username: required, at most 255 bytes")
	case l.Password == "" || len(l.Password) > 1024:
		return bad("password: required, at most 1024 bytes")
	}
	if err := ValidateDeviceID(l.Device.ID); err != nil {
		return err
	}
	if l.Device.Platform != PlatformIOS && l.Device.Platform != PlatformAndroid {
		return bad("device.platform: must be ios or android")
	}
	push, err := NormalizePush(l.Device.Push)
	if err != nil {
		return err
	}
	l.Device.Push = push
	return nil
}

// ValidateDeviceID checks a device id: 1 to MaxDeviceID printable ASCII
// characters other than "/" (it is a path element of the operator route).
func ValidateDeviceID(id string) error {
	if id == "" || len(id) > MaxDeviceID {
		return fmt.Errorf("%w: device.id: required, at most %d bytes", ErrInvalidRequest, MaxDeviceID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '/' {
			return fmt.Errorf("%w: device.id: printable ASCII without spaces or /", ErrInvalidRequest)
		}
	}
	return nil
}

// NormalizePush checks a push registration: a JSON object of at most
// MaxPushBytes, stored as given; absent or null is the empty object.
func NormalizePush(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage("{}"), nil
	}
	if len(t) > MaxPushBytes {
		return nil, fmt.Errorf("%w: device.push: larger than %d bytes", ErrInvalidRequest, MaxPushBytes)
	}
	var obj map[string]json.RawMessage
	if t[0] != '{' || json.Unmarshal(t, &obj) != nil {
		return nil, fmt.Errorf("%w: device.push: must be a JSON object", ErrInvalidRequest)
	}
	return append(json.RawMessage(nil), t...), nil
}

// SessionOptions configures the sessions.
type SessionOptions struct {
	Store     *db.Devices
	Directory Directory
	// OnAuthFailure is told of every failed login (the guard's
	// authentication failures); nil: nobody.
	OnAuthFailure func(src netip.AddrPort, domain, username string)
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Sessions are the device sessions, kept in bbolt.
type Sessions struct {
	store  *db.Devices
	dir    Directory
	onFail func(src netip.AddrPort, domain, username string)
	now    func() time.Time
	log    *slog.Logger
	secret []byte

	perAccount *failures
	perSource  *failures
	// dummy is checked against for an unknown user, so that it costs what
	// a wrong password costs.
	dummy [sha256.Size]byte
}

// NewSessions opens the sessions and drops those whose account is gone
// from the configuration, whose password changed, or that expired.
func NewSessions(opts SessionOptions, log *slog.Logger) (*Sessions, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Store == nil || opts.Directory == nil {
		return nil, errors.New("device sessions: store and directory are required")
	}
	s := &Sessions{store: opts.Store, dir: opts.Directory, onFail: opts.OnAuthFailure, now: opts.Now, log: log}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	if s.secret, err = opts.Store.Secret(); err != nil {
		return nil, err
	}
	s.perAccount = newFailures(loginFailuresPerAccount, loginAccountWindow, maxFailureKeys)
	s.perSource = newFailures(loginFailuresPerSource, loginSourceWindow, maxFailureKeys)
	_, _ = rand.Read(s.dummy[:])
	n, err := s.prune()
	if err != nil {
		return nil, err
	}
	if n > 0 {
		log.Info("device sessions invalidated at start", "count", n)
	}
	return s, nil
}

// prune deletes the sessions that no longer hold: expired, account gone,
// password or extension changed.
func (s *Sessions) prune() (int, error) {
	now := s.now()
	return s.store.DeleteWhere(func(d *db.DeviceSession) bool {
		if !now.Before(d.ExpiresAt) {
			return true
		}
		a, ok := s.dir.ByName(d.Tenant, d.Account)
		return !ok || a.Extension != d.Extension ||
			!hmac.Equal([]byte(s.fingerprint(a)), []byte(d.Fingerprint))
	})
}

// fingerprint is a keyed digest of the account's password: it changes with
// the password and reveals nothing of it without the install's key.
func (s *Sessions) fingerprint(a Account) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(a.Tenant + "\x00" + a.Username + "\x00" + a.Password))
	return hex.EncodeToString(m.Sum(nil))
}

// HashToken is the stored form of a token: hex SHA-256.
func HashToken(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// IsDeviceToken reports whether tok has the form of a device token (it
// says nothing of its validity).
func IsDeviceToken(tok string) bool { return strings.HasPrefix(tok, TokenPrefix) }

func newToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("device token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Login checks the credentials and opens a session for the device,
// replacing that device's earlier session of the same account. src is the
// client's address. Failures charge the account's and the source's
// buckets and the guard; an exhausted bucket refuses with
// *RateLimitedError before the credentials are looked at.
func (s *Sessions) Login(src netip.AddrPort, l Login) (Issued, error) {
	if err := l.Validate(); err != nil {
		return Issued{}, err
	}
	now := s.now()
	acctKey := strings.ToLower(l.Domain) + "\x00" + l.Username
	srcKey := src.Addr().Unmap().String()
	if ok, wait := s.perSource.check(srcKey, now); !ok {
		return Issued{}, &RateLimitedError{Wait: wait, Bucket: "source"}
	}
	if ok, wait := s.perAccount.check(acctKey, now); !ok {
		return Issued{}, &RateLimitedError{Wait: wait, Bucket: "account"}
	}
	a, known := s.dir.Account(l.Domain, l.Username)
	want := s.dummy
	if known {
		want = sha256.Sum256([]byte(a.Password))
	}
	got := sha256.Sum256([]byte(l.Password))
	match := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	if !known || !match {
		s.perSource.add(srcKey, now)
		s.perAccount.add(acctKey, now)
		if s.onFail != nil {
			s.onFail(src, l.Domain, l.Username)
		}
		return Issued{}, ErrInvalidCredentials
	}
	return s.issue(&db.DeviceSession{
		Tenant: a.Tenant, Account: a.Username, Extension: a.Extension,
		DeviceID: l.Device.ID, Platform: l.Device.Platform, Push: l.Device.Push,
		Fingerprint: s.fingerprint(a), CreatedAt: now,
	})
}

// issue gives d a new token and lifetime and stores it, revoking the token
// it had.
func (s *Sessions) issue(d *db.DeviceSession) (Issued, error) {
	tok, err := newToken()
	if err != nil {
		return Issued{}, err
	}
	now := s.now()
	d.TokenHash, d.RefreshedAt, d.ExpiresAt = HashToken(tok), now, now.Add(SessionLifetime)
	if err := s.store.Put(d); err != nil {
		return Issued{}, err
	}
	return Issued{Token: tok, Session: sessionOf(d)}, nil
}

func sessionOf(d *db.DeviceSession) Session {
	push := d.Push
	if len(push) == 0 {
		push = json.RawMessage("{}")
	}
	return Session{
		Device: Device{ID: d.DeviceID, Platform: d.Platform, Push: push, Account: d.Account,
			Extension: d.Extension, Tenant: d.Tenant},
		CreatedAt: d.CreatedAt, ExpiresAt: d.ExpiresAt,
	}
}

// get returns the live stored session of token.
func (s *Sessions) get(token string) (*db.DeviceSession, error) {
	if !IsDeviceToken(token) || len(token) > 128 {
		return nil, ErrNoSession
	}
	d, err := s.store.ByToken(HashToken(token))
	if errors.Is(err, db.ErrNoDevice) {
		return nil, ErrNoSession
	}
	if err != nil {
		return nil, err
	}
	if !s.now().Before(d.ExpiresAt) {
		return nil, ErrNoSession
	}
	return d, nil
}

// Lookup returns the live session of token.
func (s *Sessions) Lookup(token string) (Session, bool) {
	d, err := s.get(token)
	if err != nil {
		if !errors.Is(err, ErrNoSession) {
			s.log.Error("device session lookup", "err", err)
		}
		return Session{}, false
	}
	return sessionOf(d), true
}

// Refresh rolls token: the session gets a new token and lifetime and the
// old token stops working at once.
func (s *Sessions) Refresh(token string) (Issued, error) {
	d, err := s.get(token)
	if err != nil {
		return Issued{}, err
	}
	return s.issue(d)
}

// Logout deletes the session of token.
func (s *Sessions) Logout(token string) error {
	d, err := s.get(token)
	if err != nil {
		return err
	}
	if err := s.store.Delete(d.Key()); err != nil && !errors.Is(err, db.ErrNoDevice) {
		return err
	}
	return nil
}

// SetPush replaces the push registration of token's device.
func (s *Sessions) SetPush(token string, push json.RawMessage) (Session, error) {
	p, err := NormalizePush(push)
	if err != nil {
		return Session{}, err
	}
	d, err := s.get(token)
	if err != nil {
		return Session{}, err
	}
	d.Push = p
	if err := s.store.Put(d); err != nil {
		return Session{}, err
	}
	return sessionOf(d), nil
}

// AccountOf returns the configured account of a session.
func (s *Sessions) AccountOf(se Session) (Account, bool) {
	return s.dir.ByName(se.Device.Tenant, se.Device.Account)
}

// List returns every live session, ordered by tenant, account and device.
func (s *Sessions) List() ([]Session, error) {
	all, err := s.store.List()
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]Session, 0, len(all))
	for i := range all {
		if now.Before(all[i].ExpiresAt) {
			out = append(out, sessionOf(&all[i]))
		}
	}
	slices.SortFunc(out, func(a, b Session) int {
		return strings.Compare(db.DeviceKey(a.Device.Tenant, a.Device.Account, a.Device.ID),
			db.DeviceKey(b.Device.Tenant, b.Device.Account, b.Device.ID))
	})
	return out, nil
}

// Devices returns the live devices of an extension of tenant.
func (s *Sessions) Devices(tenant, extension string) []Device {
	all, err := s.List()
	if err != nil {
		s.log.Error("device sessions", "err", err)
		return nil
	}
	var out []Device
	for _, se := range all {
		if se.Device.Tenant == tenant && se.Device.Extension == extension {
			out = append(out, se.Device)
		}
	}
	return out
}

// Revoke deletes every session of deviceID in tenant; ErrNoSession when
// there is none.
func (s *Sessions) Revoke(tenant, deviceID string) error {
	n, err := s.store.DeleteWhere(func(d *db.DeviceSession) bool {
		return d.Tenant == tenant && d.DeviceID == deviceID
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNoSession
	}
	return nil
}
