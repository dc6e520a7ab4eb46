package mobile

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	amobile "pbx/appliance/mobile"
	"pbx/web/api"
)

// Prefix is where the device API lives.
const Prefix = "/v1/mobile"

// maxBody bounds a request body (a login with its push object is well
// under it).
const maxBody = 16 << 10

// Sessions are the device sessions. *mobile.Sessions implements it.
type Sessions interface {
	Login(src netip.AddrPort, l amobile.Login) (amobile.Issued, error)
	Lookup(token string) (amobile.Session, bool)
	Refresh(token string) (amobile.Issued, error)
	Logout(token string) error
	SetPush(token string, push json.RawMessage) (amobile.Session, error)
	AccountOf(s amobile.Session) (amobile.Account, bool)
}

// Calls places app calls and hands out room tokens; the room service side
// implements it. Errors: mobile.ErrBadDestination (400),
// mobile.ErrRoomNotFound (404), mobile.ErrNoRoomService (404 not
// running), anything else 500.
type Calls interface {
	Place(ctx context.Context, s amobile.Session, to string) (amobile.Call, error)
	RoomToken(ctx context.Context, s amobile.Session, room string) (amobile.JoinToken, error)
}

// Voicemail is one extension's mailbox. List and Get return what the API
// renders as JSON; an unknown id is api.ErrNotFound.
type Voicemail interface {
	List(ctx context.Context, tenant, extension string) (any, error)
	Get(ctx context.Context, tenant, extension, id string) (any, error)
	// Audio opens a message's WAV; the caller closes it.
	Audio(ctx context.Context, tenant, extension, id string) (io.ReadSeekCloser, time.Time, error)
	Delete(ctx context.Context, tenant, extension, id string) error
}

// Limit spends one token of key's bucket; when none is left it says how
// long until one is.
type Limit func(key string) (bool, time.Duration)

// Options configures the device API.
type Options struct {
	Sessions Sessions
	// CallLog is the call log; nil: not running.
	CallLog api.CallLog
	// Voicemail is the mailbox store; nil: not running.
	Voicemail Voicemail
	// Calls is the room service side; nil: not running.
	Calls Calls
	// RoomServiceURL is the room service URL of a tenant ("" when none).
	RoomServiceURL func(tenant string) string
	// RequestLimit is the per-session request rate; nil: none.
	RequestLimit Limit
	// AuthFailLimit is the per-peer bucket of failed authentications; nil:
	// none.
	AuthFailLimit Limit
	Log           *slog.Logger
}

// Handler serves the device API.
type Handler struct {
	o   Options
	log *slog.Logger
	mux *chi.Mux
}

// New returns the device API handler.
func New(o Options) *Handler {
	h := &Handler{o: o, log: o.Log}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.o.RoomServiceURL == nil {
		h.o.RoomServiceURL = func(string) string { return "" }
	}
	m := chi.NewRouter()
	m.NotFound(func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, r, h.log, api.NotFound("no such route"))
	})
	m.MethodNotAllowed(h.methodNotAllowed)
	m.Post(Prefix+"/login", h.public(h.login))
	m.Post(Prefix+"/token/refresh", h.device(h.refresh))
	m.Post(Prefix+"/logout", h.device(h.logout))
	h.get(m, Prefix+"/me", h.device(h.me))
	m.Put(Prefix+"/device", h.device(h.setDevice))
	h.get(m, Prefix+"/cdr", h.device(h.cdr, cdrParams...))
	h.get(m, Prefix+"/voicemail", h.device(h.voicemailList))
	h.get(m, Prefix+"/voicemail/{id}", h.device(h.voicemailGet))
	h.get(m, Prefix+"/voicemail/{id}/audio", h.device(h.voicemailAudio))
	m.Delete(Prefix+"/voicemail/{id}", h.device(h.voicemailDelete))
	m.Post(Prefix+"/calls", h.device(h.placeCall))
	m.Post(Prefix+"/roomservice/token", h.device(h.roomToken))
	h.mux = m
	return h
}

func (h *Handler) get(m *chi.Mux, pattern string, fn http.HandlerFunc) {
	m.Get(pattern, fn)
	m.Head(pattern, fn)
}

// ServeHTTP routes on the full path, whatever router mounted it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := context.WithValue(r.Context(), chi.RouteCtxKey, nil)
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// probeMethods are the methods tried to build an Allow header.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

func (h *Handler) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range probeMethods {
		if h.mux.Match(chi.NewRouteContext(), m, r.URL.Path) {
			allow = append(allow, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	api.WriteError(w, r, h.log, &api.Error{Status: http.StatusMethodNotAllowed, Code: api.CodeInvalidRequest,
		Message: "method " + clip(r.Method) + " is not allowed here; allowed: " + strings.Join(allow, ", ")})
}

// handlerFunc serves a device route; errors go to the one renderer.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c *call) error

// call is one request's context: the session and its token, the query.
type call struct {
	token   string
	session amobile.Session
	query   api.Query
}

// public serves a route without a token.
func (h *Handler) public(fn handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := &call{}
		err := h.checkQuery(r, c, nil)
		if err == nil {
			err = fn(w, r, c)
		}
		if err != nil {
			h.writeError(w, r, err)
		}
	}
}

// device serves a route on a live device token: anything else (an operator
// token, an expired, revoked or unknown one) is 401, charged to the peer's
// failed-authentication bucket.
func (h *Handler) device(fn handlerFunc, accepted ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		se, ok := amobile.Session{}, false
		if amobile.IsDeviceToken(tok) {
			se, ok = h.o.Sessions.Lookup(tok)
		}
		if !ok {
			if h.o.AuthFailLimit != nil {
				if ok, wait := h.o.AuthFailLimit(peerIP(r)); !ok {
					h.tooMany(w, r, wait, "too many failed authentication attempts")
					return
				}
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pbx-device"`)
			api.WriteError(w, r, h.log, &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized,
				Message: "missing or invalid device token"})
			return
		}
		if h.o.RequestLimit != nil {
			key := "device\x00" + se.Device.Tenant + "\x00" + se.Device.Account + "\x00" + se.Device.ID
			if ok, wait := h.o.RequestLimit(key); !ok {
				h.tooMany(w, r, wait, "rate limit of this device exceeded")
				return
			}
		}
		c := &call{token: tok, session: se}
		err := h.checkQuery(r, c, accepted)
		if err == nil {
			err = fn(w, r, c)
		}
		if err != nil {
			h.writeError(w, r, err)
		}
	}
}

func (h *Handler) checkQuery(r *http.Request, c *call, accepted []string) error {
	q, err := api.ParseQuery(r.URL.RawQuery, accepted)
	c.query = q
	return err
}

func (h *Handler) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, what string) {
	s := retryAfter(wait)
	w.Header().Set("Retry-After", strconv.Itoa(s))
	api.WriteError(w, r, h.log, &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeRateLimited,
		Message: what + "; retry after " + strconv.Itoa(s) + "s"})
}

func retryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// writeError maps the sessions' and the room service's errors, then
// renders the envelope.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var rl *amobile.RateLimitedError
	switch {
	case errors.As(err, &rl):
		h.tooMany(w, r, rl.Wait, "too many failed logins")
		return
	case errors.Is(err, amobile.ErrInvalidCredentials):
		err = &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "invalid credentials"}
	case errors.Is(err, amobile.ErrNoSession):
		err = &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "missing or invalid device token"}
	case errors.Is(err, amobile.ErrInvalidRequest):
		msg, _ := strings.CutPrefix(err.Error(), amobile.ErrInvalidRequest.Error()+": ")
		err = api.Invalid("%s", msg)
	case errors.Is(err, amobile.ErrBadDestination):
		err = api.Invalid("to: %s", err.Error())
	case errors.Is(err, amobile.ErrRoomNotFound):
		err = api.NotFound("no such room")
	case errors.Is(err, amobile.ErrNoRoomService):
		err = api.NotRunning("room service")
	case errors.Is(err, amobile.ErrUnavailable):
		err = api.Internal(err) // the room service failed; the app may retry
	}
	api.WriteError(w, r, h.log, err)
}

// peerIP is the socket peer's address; X-Forwarded-For is never read.
func peerIP(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return ap.Addr().Unmap().String()
}

// bearer extracts the token of the one Authorization header, or "".
func bearer(r *http.Request) string {
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 {
		return ""
	}
	scheme, tok, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// decode reads a JSON body of at most maxBody bytes into v: one object, no
// unknown keys, nothing after it.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return api.Invalid("the body must be application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return api.Invalid("body larger than %d bytes", maxBody)
		case errors.Is(err, io.EOF):
			return api.Invalid("a JSON body is required")
		}
		return api.Invalid("malformed JSON body: %s", clip(err.Error()))
	}
	if dec.More() {
		return api.Invalid("one JSON object only")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return api.Invalid("one JSON object only")
	}
	return nil
}

// noBody refuses a request body on a route that takes none.
func noBody(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil
	}
	var one [1]byte
	if n, _ := io.ReadFull(io.LimitReader(r.Body, 1), one[:]); n > 0 {
		return api.Invalid("this route takes no request body")
	}
	return nil
}

// srcAddr is the peer as an address and port.
func srcAddr(r *http.Request) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
