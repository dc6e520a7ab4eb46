package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"pbx/appliance/config"
	"pbx/web/api"
	"pbx/web/dashboard"
	"pbx/web/mobile"
)

// Server timeouts.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 32 << 10
	shutdownTimeout   = 5 * time.Second
)

// Options configures a Server.
type Options struct {
	// API is the api block of the configuration.
	API config.API
	// Backends are the components the handlers read and act on; a nil
	// one is a component that is not running.
	Backends api.Backends
	// DeviceAPI, when set, serves the paths under /v1/mobile that are not
	// the operator routes (the device API).
	DeviceAPI http.Handler
	// Mobile, when set and DeviceAPI is not, configures the device API
	// the server builds with its own rate limits.
	Mobile *mobile.Options
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Heartbeat is the event stream's heartbeat period; 0: the default.
	Heartbeat time.Duration
}

// Server is the management API server.
type Server struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	origins []string

	creds      atomic.Pointer[credentialSet]
	tokenLimit *limiter // nil: per-token limit disabled
	authFail   *limiter
	certs      *certManager // nil: plain HTTP
	metrics    *metrics

	mux     *chi.Mux
	subs    map[string]*chi.Mux // "/v1/<resource>" -> its router, for Allow
	handler http.Handler

	mu  sync.Mutex
	ln  net.Listener
	srv *http.Server

	// closing ends the event streams when shutdown starts: they never end
	// by themselves, and Shutdown waits for every request.
	closing     chan struct{}
	closingOnce sync.Once
}

// New builds the server from opts. It checks the credentials and loads the
// TLS certificates, but binds nothing: Listen (or Run) does. With
// api.enabled false it returns a server that serves nothing.
func New(opts Options, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: log, now: opts.Now, origins: opts.API.CORS.AllowedOrigins, closing: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	if !opts.API.Enabled {
		return s, nil
	}
	if err := s.SetCredentials(opts.API.Tokens); err != nil {
		return nil, err
	}
	rl := opts.API.RateLimit
	switch {
	case rl.RequestsPerMinute < 0: // disabled
	case rl.RequestsPerMinute == 0:
		s.tokenLimit = newLimiter(config.DefaultRequestsPerMin, config.DefaultBurst, 0, s.now)
	default:
		burst := rl.Burst
		if burst == 0 {
			burst = config.DefaultBurst
		}
		s.tokenLimit = newLimiter(rl.RequestsPerMinute, burst, 0, s.now)
	}
	s.authFail = newLimiter(authFailPerMinute, authFailBurst, maxPeers, s.now)
	if opts.API.TLS != nil {
		m, err := newCertManager(*opts.API.TLS, log)
		if err != nil {
			return nil, err
		}
		s.certs = m
	}
	if opts.Mobile != nil && opts.DeviceAPI == nil {
		s.opts.DeviceAPI = s.deviceAPI(*opts.Mobile, log)
	}
	s.metrics = newMetrics(opts.Backends)
	s.mux = s.routes(api.New(api.Options{
		Backends:  opts.Backends,
		Presign:   opts.API.Recordings.Presign,
		Now:       s.now,
		Log:       log,
		Closing:   s.closing,
		Heartbeat: opts.Heartbeat,
		Metrics:   s.metrics.handler(),
	}))
	s.handler = s.mux
	return s, nil
}

// deviceAPI builds the device API with the management API's limits: the
// per-token rate applies to each device session (in a table of its own,
// bounded like the peers'), and failed device authentications share the
// peers' failed-authentication bucket.
func (s *Server) deviceAPI(o mobile.Options, log *slog.Logger) http.Handler {
	if s.tokenLimit != nil {
		l := newLimiter(s.tokenLimit.rate*60, s.tokenLimit.burst, maxPeers, s.now)
		o.RequestLimit = l.take
	}
	o.AuthFailLimit = s.authFail.take
	if o.Log == nil {
		o.Log = log
	}
	return mobile.New(o)
}

// routes builds the router: the common middleware, the catch-all 404 and
// the 405, then every resource under /v1.
func (s *Server) routes(h *api.Handler) *chi.Mux {
	r := chi.NewRouter()
	r.Use(requestID, s.recoverer, s.cors)
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed)
	s.subs = map[string]*chi.Mux{}
	r.Route("/v1", func(r chi.Router) {
		for _, res := range h.Resources() {
			r.Route(res.Prefix, func(r chi.Router) {
				if m, ok := r.(*chi.Mux); ok {
					s.subs["/v1"+res.Prefix] = m
				}
				for _, rt := range res.Routes {
					e := s.endpoint(rt)
					if rt.Scope != "" {
						e = s.authenticate(e)
					}
					r.Method(rt.Method, rt.Pattern, e)
					if rt.Method == http.MethodGet {
						r.Method(http.MethodHead, rt.Pattern, e)
					}
				}
				if res.Prefix == "/mobile" {
					if s.opts.DeviceAPI != nil {
						r.NotFound(s.opts.DeviceAPI.ServeHTTP)
					} else { // no data directory: no device sessions
						r.NotFound(func(w http.ResponseWriter, r *http.Request) {
							api.WriteError(w, r, s.log, api.NotRunning("the device API"))
						})
					}
				}
			})
		}
		r.Route("/dashboard", func(r chi.Router) {
			if m, ok := r.(*chi.Mux); ok {
				s.subs["/v1/dashboard"] = m
			}
			r.Get("/", s.dashboard)
			r.Head("/", s.dashboard)
			r.Get("/{asset}", s.dashboard)
			r.Head("/{asset}", s.dashboard)
		})
	})
	return r
}

// dashboard serves the embedded page and its assets: public static files,
// whose data all comes from authenticated routes.
func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	body, ct, ok := dashboard.Asset(chi.URLParam(r, "asset"))
	if !ok {
		s.notFound(w, r)
		return
	}
	dashboard.Headers(w.Header())
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// Enabled reports whether api.enabled is set.
func (s *Server) Enabled() bool { return s.opts.API.Enabled }

// Handler is the whole middleware stack and router, for in-process use.
func (s *Server) Handler() http.Handler { return s.handler }

// SetCredentials replaces the operator tokens atomically. A set that does
// not check leaves the running one in place and returns why.
func (s *Server) SetCredentials(tokens []config.Token) error {
	set, err := compileCredentials(tokens)
	if err != nil {
		return fmt.Errorf("api credentials: %w", err)
	}
	s.creds.Store(set)
	if s.tokenLimit != nil {
		names := set.names()
		s.tokenLimit.keep(func(n string) bool { return names[n] })
	}
	s.log.Info("api credentials loaded", "tokens", len(set.creds))
	return nil
}

// Listen binds the listener, so that an address in use or a bad bindHost
// surfaces before the service reports ready. Run calls it when needed.
func (s *Server) Listen() error {
	if !s.Enabled() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	host := s.opts.API.BindHost
	if host == "" {
		host = config.DefaultAPIBindHost
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(s.opts.API.BindPort)))
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	if s.certs != nil {
		ln = tls.NewListener(ln, s.certs.serverConfig())
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.srv.RegisterOnShutdown(func() { s.closingOnce.Do(func() { close(s.closing) }) })
	s.log.Info("api listening", "addr", ln.Addr().String(), "tls", s.certs != nil)
	return nil
}

// Addr is the bound address, nil before Listen or when disabled.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Run binds (if Listen was not called) and serves until ctx ends, then
// shuts down gracefully. A disabled server just waits for ctx.
func (s *Server) Run(ctx context.Context) error {
	if !s.Enabled() {
		<-ctx.Done()
		return nil
	}
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	srv, ln := s.srv, s.ln
	s.mu.Unlock()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if s.certs != nil {
		wg.Go(func() { s.certs.run(rctx) })
	}
	wg.Go(func() { s.metrics.follow(rctx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	var err error
	select {
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
		err = srv.Shutdown(sctx)
		scancel()
		<-errc
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Shutdown stops accepting connections and waits for active requests
// until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv, ln := s.srv, s.ln
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	_ = ln.Close() // bound by Listen but never served: Shutdown does not know it
	return err
}
