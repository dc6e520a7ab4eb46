package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/datadir"
	"pbx/appliance/dialplan"
	"pbx/appliance/events"
	"pbx/appliance/guard"
	"pbx/appliance/mobile"
	"pbx/appliance/mwi"
	"pbx/appliance/recording"
	"pbx/appliance/sdnotify"
	"pbx/appliance/tenant"
	"pbx/appliance/upload"
	"pbx/appliance/voicemail"
	"pbx/appliance/voicemail/notice"
	"pbx/appliance/webhook"
	"pbx/db"
	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
	"pbx/web"
)

// Options adjust how the appliance runs.
type Options struct {
	// ConfigDir is the configuration root, re-read on SIGHUP for the API credentials.
	ConfigDir string
	// DrainTimeout bounds how long calls in progress may continue after SIGTERM.
	DrainTimeout time.Duration
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Devices and Webhooks replace the device sessions and the webhook
	// dispatcher as the mobile offers' sources (tests); nil: the real ones.
	Devices  mobile.Devices
	Webhooks mobile.Webhooks
}

// DefaultDrainTimeout is how long calls may continue after SIGTERM.
const DefaultDrainTimeout = 5 * time.Minute

// Appliance is one running PBX.
type Appliance struct {
	opts Options
	log  *slog.Logger
	cfg  *config.Config

	lock    *datadir.Held
	db      *db.DB
	cdr     *cdr.Store
	rec     *recording.Store // nil unless recording is on somewhere
	upl     *upload.Queue    // nil unless recordings go to s3
	vm      *voicemail.Store // nil unless a tenant has mailboxes
	notices *notice.Outbox   // voicemail email notices; nil with vm
	dir     *tenant.Directory
	guard   *guard.Guard
	limits  *guard.Limiter
	sip     *sipcore.Server
	reg     *registrar.Registrar
	mwi     *mwi.Service // nil unless message waiting is on
	media   *rtpcore.Engine
	calls   *b2bua.Manager
	trunks  *trunk.Manager
	web     *web.Server
	bus     *events.Bus
	// devices are the mobile device sessions (nil without a data
	// directory); hooks delivers the tenants' webhooks.
	devices *mobile.Sessions
	hooks   *webhook.Dispatcher
	mobile  *mobile.Service // offers toward apps, call grants
	src     *apiSources
	closed  sync.Once
}

// New builds every part from cfg: it takes the data directory, recovers call records
// left in flight by a crash, then binds every socket, so that a port in use or a
// refused listener is an error here, before readiness is reported.
//
// Each step stores what it built in a before the next one starts, so that on a
// failure Close releases what the earlier steps opened.
func New(cfg *config.Config, opts Options, log *slog.Logger) (a *Appliance, err error) {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	a = &Appliance{opts: opts, log: log, cfg: cfg}
	built := a // an error return sets a to nil
	defer func() {
		if err != nil {
			built.Close()
			a = nil
		}
	}()
	sys := &cfg.System

	if dd := cfg.DataDir(); dd != "" {
		if err := a.openDataDir(dd); err != nil {
			return nil, err
		}
	}
	a.dir = tenant.New(cfg)
	a.bus = events.New(0)
	lv := live{a.bus}
	if a.guard, a.limits, err = a.newGuard(lv); err != nil {
		return nil, err
	}
	if a.sip, err = a.newSIP(); err != nil {
		return nil, fmt.Errorf("sip: %w", err)
	}

	auth, err := registrar.NewAuth(registrar.AuthOptions{Algorithms: sys.SIP.DigestAlgorithms}, a.dir.SIPAccounts())
	if err != nil {
		return nil, err
	}
	onAuthFailure := logAuthFailures(log.With("component", "sip"), a.guard.OnAuthFailure)
	if a.reg, err = a.newRegistrar(auth, onAuthFailure, lv); err != nil {
		return nil, err
	}
	if mwi.Enabled(cfg) {
		if a.mwi, err = a.newMWI(auth, onAuthFailure); err != nil {
			return nil, err
		}
	}

	if a.media, err = newMedia(sys, log.With("component", "media")); err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	codecs, err := sdp.CodecsByName(sys.Media.Codecs)
	if err != nil {
		return nil, err
	}
	if a.trunks, err = trunk.New(dialplan.TrunkSpecs(cfg.Trunks), trunk.Options{SIP: a.sip, OnState: lv.trunk, Resolver: dnsTestKnob()}, log.With("component", "trunks")); err != nil {
		return nil, err
	}
	if a.hooks, err = webhook.New(webhook.Options{Webhooks: cfg.Webhooks, Defaults: sys.Webhooks, DataDir: cfg.DataDir()}, log.With("component", "webhook")); err != nil {
		return nil, err
	}
	if a.db != nil {
		if a.devices, err = newSessions(a.db, a.dir, onAuthFailure, log.With("component", "mobile")); err != nil {
			return nil, err
		}
	}
	a.mobile = a.newMobile()
	rt, err := a.newDialplan(onAuthFailure)
	if err != nil {
		return nil, err
	}
	if a.calls, err = a.newCalls(auth, rt, codecs, a.callObservers(rt, lv), onAuthFailure); err != nil {
		return nil, err
	}
	limitsLog := log.With("component", "limits")
	a.limits.OnExhausted(func(id b2bua.CallID, err error) {
		limitsLog.Info("call cut: outbound minutes spent", "call", id, "err", err)
		_ = a.calls.End(id, err.Error())
	})

	a.src = &apiSources{started: time.Now(), cfg: cfg, dir: a.dir, reg: a.reg, calls: a.calls, trunks: a.trunks, cdr: a.cdr, uploads: a.upl}
	if a.web, err = a.newAPI(); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	return a, nil
}

// MWI returns message waiting, nil when it is off; the voicemail store calls
// its Notify on every change and gives it its counts (SetCounts).
func (a *Appliance) MWI() *mwi.Service { return a.mwi }

// mailboxChanged tells the lamps and the event stream of a change to a
// mailbox (during the store's recovery at start neither exists yet).
func (a *Appliance) mailboxChanged(tenant, ext string) {
	a.mwi.Notify(tenant, ext)
	if a.bus == nil || a.vm == nil {
		return
	}
	if n, saved, err := a.vm.Counts(tenant, ext); err == nil {
		live{a.bus}.voicemail(tenant, ext, n, saved)
	}
}

// Mobile is the mobile side of calls: Place and RoomToken for the device
// routes.
func (a *Appliance) Mobile() *mobile.Service { return a.mobile }

// SIP returns the SIP server (for tests that need the bound addresses).
func (a *Appliance) SIP() *sipcore.Server { return a.sip }

// Run serves until ctx ends.
func (a *Appliance) Run(ctx context.Context) error {
	for _, l := range a.sip.Listeners() {
		a.log.Info("sip listener ready", "id", l.ID, "transport", l.Transport, "addr", fmt.Sprintf("%s:%d", l.BindHost, l.BindPort))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.sip.Run(gctx) })
	g.Go(func() error { return a.reg.Run(gctx) })
	g.Go(func() error { return a.guard.Run(gctx) })
	g.Go(func() error { return a.hooks.Run(gctx) })
	if a.mwi != nil {
		g.Go(func() error { return a.mwi.Run(gctx) })
	}
	g.Go(func() error { return live{a.bus}.runCounters(gctx, a.src, a.guard) })
	g.Go(func() error { return a.limits.Run(gctx, 0, a.log.With("component", "limits")) })
	g.Go(func() error {
		// Registrations leave from the listening sockets, once they serve.
		select {
		case <-a.sip.Ready():
		case <-gctx.Done():
			return nil
		}
		return a.trunks.Run(gctx)
	})
	if a.cdr != nil {
		g.Go(func() error { return a.cdr.Run(gctx) })
	}
	if a.upl != nil {
		g.Go(func() error { return a.upl.Run(gctx) })
	}
	if a.vm != nil {
		g.Go(func() error { a.vm.Janitor(gctx, a.cfg.System.Voicemail.Retention.D()); return nil })
		g.Go(func() error { return a.notices.Run(gctx) })
	}
	if a.web.Enabled() {
		g.Go(func() error { return a.web.Run(gctx) })
	}
	var udp netip.AddrPort
	for _, l := range a.sip.Listeners() {
		if l.Transport == sipcore.TransportUDP {
			udp, _ = a.sip.Addr(l.ID)
			break
		}
	}
	h := newHealth(udp)
	g.Go(func() error { return h.Run(gctx) })
	g.Go(func() error { return sdnotify.KeepAlive(gctx, h.Healthy) })
	_ = sdnotify.Ready()
	_ = sdnotify.Status("serving")
	<-gctx.Done()
	// End the calls still up so their records are committed, then stop.
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.calls.Close(cctx); err != nil {
		a.log.Warn("ending calls at shutdown", "err", err)
	}
	if a.rec != nil {
		a.rec.Wait() // the recordings of the calls just ended
	}
	if a.cdr != nil {
		a.cdr.Flush() // the records of the calls just ended, durable
	}
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Drain stops accepting new calls; calls in progress may continue.
func (a *Appliance) Drain() {
	a.sip.Drain()
	_ = sdnotify.Stopping()
}

// ActiveCalls is the number of calls in progress.
func (a *Appliance) ActiveCalls() int { return a.calls.Active() }

// ErrReloadRefused wraps the reasons a reload that validated is still not
// applied: SIGHUP changes the API credential set only, so a configuration that
// turns the API off (or on) needs a restart, and the running set stays.
var ErrReloadRefused = errors.New("reload refused")

// ErrNothingToReload is returned by Reload when the API is off before and
// after: there is no credential set to reload.
var ErrNothingToReload = errors.New("nothing to reload: the API is off, and SIGHUP reloads the API credentials only")

// Reload re-reads the configuration and applies only the API credential set. A
// configuration with problems leaves the running set in place; the problems are
// returned (and logged by the caller). A configuration whose api.enabled
// differs from the running one is refused with an error wrapping
// ErrReloadRefused, never reported as reloaded.
func (a *Appliance) Reload() (*config.Report, error) {
	_ = sdnotify.Reloading()
	defer sdnotify.Ready()
	cfg, rep, err := config.Load(a.opts.ConfigDir, config.Options{Getenv: a.opts.Getenv})
	if err != nil {
		return nil, err
	}
	if !rep.OK() {
		return rep, nil
	}
	switch running, wanted := a.web.Enabled(), cfg.System.API.Enabled; {
	case running && !wanted:
		return nil, fmt.Errorf("%w: the new configuration sets api.enabled: false; SIGHUP reloads the API credentials only, so turning the API off needs a restart", ErrReloadRefused)
	case !running && wanted:
		return nil, fmt.Errorf("%w: the new configuration sets api.enabled: true but the API is not running; turning it on needs a restart", ErrReloadRefused)
	case !running:
		return nil, ErrNothingToReload
	}
	if err := a.web.SetCredentials(cfg.System.API.Tokens); err != nil {
		return nil, err
	}
	return rep, nil
}

// Close releases every socket and file, in reverse order of New.
func (a *Appliance) Close() error {
	var errs []error
	a.closed.Do(func() {
		if a.media != nil {
			errs = append(errs, a.media.Close())
		}
		if a.sip != nil {
			errs = append(errs, a.sip.Close())
		}
		if a.reg != nil {
			errs = append(errs, a.reg.Close())
		}
		if a.db != nil {
			if a.limits != nil {
				errs = append(errs, a.limits.Flush()) // the minutes of calls ended at shutdown
			}
			errs = append(errs, a.db.Close())
		}
		if a.lock != nil {
			errs = append(errs, a.lock.Unlock())
		}
	})
	return errors.Join(errs...)
}
