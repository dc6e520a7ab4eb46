package web

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"pbx/web/api"
)

// Request id bounds for echoing an inbound X-Request-Id.
const (
	minRequestID = 8
	maxRequestID = 64
)

// validRequestID reports whether an inbound X-Request-Id may be echoed:
// 8 to 64 characters of [A-Za-z0-9_-].
func validRequestID(s string) bool {
	if len(s) < minRequestID || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [15]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// requestID echoes a valid inbound X-Request-Id or makes one, on every
// response, and stores it in the context. It also sets the headers every
// answer carries.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ""
		if vs := r.Header.Values("X-Request-Id"); len(vs) == 1 && validRequestID(vs[0]) {
			id = vs[0]
		} else {
			id = newRequestID()
		}
		h := w.Header()
		h.Set("X-Request-Id", id)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r.WithContext(api.WithRequestID(r.Context(), id)))
	})
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// recoverer turns a panic into a generic 500, logging the cause and stack
// with the request id, and logs every request at debug level.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		start := time.Now()
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("api handler panicked", "request_id", api.RequestIDFrom(r.Context()),
					"method", r.Method, "path", r.URL.Path, "err", fmt.Sprint(v), "stack", string(debug.Stack()))
				if sw.status == 0 {
					api.WriteError(sw, r, nil, api.Internal(errors.New("panic")))
				}
				return
			}
			if s.metrics != nil {
				s.metrics.observe(r, sw.code())
			}
			if s.log.Enabled(r.Context(), slog.LevelDebug) {
				s.log.Debug("api request", "request_id", api.RequestIDFrom(r.Context()), "method", r.Method,
					"path", r.URL.Path, "status", sw.code(), "remote", peerIP(r), "duration", time.Since(start))
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// cors answers for the configured origins only. With none configured it
// adds nothing, and a preflight OPTIONS falls through to routing (405).
func (s *Server) cors(next http.Handler) http.Handler {
	if len(s.origins) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		if !slices.Contains(s.origins, origin) {
			next.ServeHTTP(w, r)
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, X-Request-Id")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
		next.ServeHTTP(w, r)
	})
}

// peerIP is the socket peer's address; X-Forwarded-For and the like are
// never read.
func peerIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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

func rateLimited(d time.Duration, what string) *api.Error {
	return &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeRateLimited,
		Message: what + "; retry after " + strconv.Itoa(retryAfter(d)) + "s"}
}

// authenticate admits a request with a valid, unexpired bearer token and
// puts its principal in the context. The presented token is checked first
// (in constant time); only a failure is charged to the peer's
// failed-authentication bucket, and a peer whose bucket is empty gets 429
// for its failures. A valid token is therefore never refused for the
// failures of its address: another local process guessing cannot lock the
// operator out, and a guesser still gets no more than authFailPerMinute
// answers a minute, none of which says whether a guess was right.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := peerIP(r)
		c := s.creds.Load().match(bearer(r))
		expired := c != nil && !c.expires.IsZero() && !s.now().Before(c.expires)
		if c == nil || expired {
			if ok, wait := s.authFail.take(peer); !ok {
				s.tooMany(w, r, wait, "too many failed authentication attempts")
				return
			}
			if expired {
				s.log.Warn("api token expired", "token", c.principal.Name, "remote", peer,
					"request_id", api.RequestIDFrom(r.Context()))
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pbx"`)
			api.WriteError(w, r, s.log, &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized,
				Message: "missing or invalid bearer token"})
			return
		}
		if s.tokenLimit != nil {
			if ok, wait := s.tokenLimit.take(c.principal.Name); !ok {
				s.tooMany(w, r, wait, "rate limit of token "+c.principal.Name+" exceeded")
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(api.WithPrincipal(r.Context(), c.principal)))
	})
}

func (s *Server) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, what string) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter(wait)))
	api.WriteError(w, r, s.log, rateLimited(wait, what))
}

// endpoint serves one route after authentication: scope, process-global
// data, query string, body, handler, and the audit line of an operator
// action.
func (s *Server) endpoint(rt api.Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		err := s.serveRoute(sw, r, rt)
		if err != nil {
			api.WriteError(sw, r, s.log, err)
		}
		if rt.Action != "" {
			p := api.PrincipalFrom(r.Context())
			name := ""
			if p != nil {
				name = p.Name
			}
			rctx := chi.RouteContext(r.Context())
			attrs := []any{"action", rt.Action, "token", name, "method", r.Method, "path", r.URL.Path,
				"status", sw.code(), "remote", peerIP(r), "request_id", api.RequestIDFrom(r.Context())}
			if rctx != nil {
				for i, k := range rctx.URLParams.Keys {
					if k != "*" && i < len(rctx.URLParams.Values) {
						attrs = append(attrs, k, rctx.URLParams.Values[i])
					}
				}
			}
			s.log.Info("api audit", attrs...)
		}
	})
}

func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request, rt api.Route) error {
	p := api.PrincipalFrom(r.Context())
	if rt.Scope != "" {
		if p == nil {
			return api.Internal(errors.New("route without authentication"))
		}
		if !p.HasScope(rt.Scope) {
			return api.Forbidden("this token lacks the %s scope", rt.Scope)
		}
		if rt.Global && p.Restricted() {
			return api.Forbidden("guard data is process-global: not available to a tenant-restricted token")
		}
	}
	q, err := api.ParseQuery(r.URL.RawQuery, rt.Query)
	if err != nil {
		return err
	}
	if t, ok := q["tenant"]; ok && p != nil && !p.SeesTenant(t) {
		return api.Forbidden("tenant %q is outside this token's tenants", clip(t))
	}
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		var one [1]byte
		if n, _ := io.ReadFull(io.LimitReader(r.Body, 1), one[:]); n > 0 {
			return api.Invalid("this route takes no request body")
		}
	}
	return rt.Handle(w, r, q)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// notFound is the catch-all: it never looks at credentials.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	api.WriteError(w, r, s.log, api.NotFound("no such route"))
}

// probeMethods are the methods tried to build an Allow header.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// methodNotAllowed answers 405 with the methods the path does accept. It
// asks the resource's own router: chi's Match on the root counts a mount
// point as matching every method.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allow []string
	for prefix, sub := range s.subs {
		rest, ok := strings.CutPrefix(path, prefix)
		if !ok || rest != "" && rest[0] != '/' {
			continue
		}
		if rest == "" {
			rest = "/"
		}
		for _, m := range probeMethods {
			if sub.Match(chi.NewRouteContext(), m, rest) {
				allow = append(allow, m)
			}
		}
	}
	if len(allow) == 0 {
		s.notFound(w, r)
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	api.WriteError(w, r, s.log, &api.Error{Status: http.StatusMethodNotAllowed, Code: api.CodeInvalidRequest,
		Message: fmt.Sprintf("method %s is not allowed here; allowed: %s", clip(r.Method), strings.Join(allow, ", "))})
}
