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

	"github.com/emiago/sipgo/sip"
	"golang.org/x/sync/errgroup"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/datadir"
	"pbx/appliance/dialplan"
	"pbx/appliance/events"
	"pbx/appliance/guard"
	"pbx/appliance/mobile"
	"pbx/appliance/moh"
	"pbx/appliance/mwi"
	"pbx/appliance/prompts"
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
	mobileweb "pbx/web/mobile"
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
		if err := os.MkdirAll(dd, 0o750); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
		if a.lock, err = datadir.Lock(dd); err != nil {
			return nil, err
		}
		if a.db, err = db.Open(dd, db.Options{}, log.With("component", "db")); err != nil {
			return nil, err
		}
		if sys.CDR.Enabled {
			a.cdr, err = cdr.New(cdrTestKnobs(cdr.Options{DataDir: dd, Location: cfg.LocationFunc(), Retention: sys.CDR.Retention.D()}), log.With("component", "cdr"))
			if err != nil {
				return nil, err
			}
			// Recovery runs before any listener opens.
			actions, err := a.cdr.Recover(context.Background())
			if err != nil {
				return nil, fmt.Errorf("call record recovery: %w", err)
			}
			for _, act := range actions {
				log.Warn("call record recovery", "action", act.String())
			}
		}
		if recording.Enabled(cfg) {
			if a.rec, a.upl, err = newRecordings(dd, cfg, a.cdr, log.With("component", "recording")); err != nil {
				return nil, err
			}
		}
		if hasMailboxes(cfg) {
			if a.vm, a.notices, err = newVoicemail(dd, cfg, a.mailboxChanged, log.With("component", "voicemail")); err != nil {
				return nil, err
			}
		}
	}
	a.dir = tenant.New(cfg)
	a.bus = events.New(0)
	lv := live{a.bus}
	// The guard always runs: disabled, it admits everything but still counts.
	accounts := guard.AccountOptions{Tenant: a.dir.SIPAccounts().TenantOf}
	if a.guard, err = guard.New(guard.Options{Security: sys.Security, Accounts: accounts, OnBan: lv.ban, OnLift: lv.lift}, log.With("component", "guard")); err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	a.limits = guard.NewLimiter(cfg, nil)
	if a.db != nil {
		// Beyond the specification: the minutes budgets survive a restart.
		if err := a.limits.Persist(a.db.Minutes()); err != nil {
			return nil, fmt.Errorf("security limits: %w", err)
		}
	}

	// sipgo's own log lines (transport warnings) go to our logger, not slog's default.
	sip.SetDefaultLogger(sipcore.SIPStackLogger(log.With("component", "sipgo")))
	var listeners []sipcore.Listener
	for _, l := range sys.SIP.Transports {
		listeners = append(listeners, sipcore.Listener{ID: l.ID, Transport: l.Transport, BindHost: l.BindHost, BindPort: l.BindPort})
	}
	if a.sip, err = sipcore.New(sipcore.Options{
		Listeners:    listeners,
		UserAgent:    sys.SIP.UserAgent,
		ContactUser:  *sys.SIP.ContactUser,
		ExternalHost: sys.SIP.ExternalHost,
		Admit:        a.guard.Admit,
		TCP: sipcore.TCPOptions{
			IdleTimeout:    sys.SIP.TCP.IdleTimeout.D(),
			MaxConnections: sys.SIP.TCP.MaxConnections,
			MaxPerSource:   sys.SIP.TCP.MaxPerSource,
		},
	}, log.With("component", "sip")); err != nil {
		return nil, fmt.Errorf("sip: %w", err)
	}

	auth, err := registrar.NewAuth(registrar.AuthOptions{Algorithms: sys.SIP.DigestAlgorithms}, a.dir.SIPAccounts())
	if err != nil {
		return nil, err
	}
	onAuthFailure := logAuthFailures(log.With("component", "sip"), a.guard.OnAuthFailure)
	regOpts := registrar.Options{Auth: auth, OnAuthFailure: onAuthFailure, OnAuthSuccess: a.guard.OnAuthSuccess, SIP: a.sip, OnChange: lv.binding}
	if a.db != nil {
		regOpts.Store = a.db.Registrations()
	}
	if a.reg, err = registrar.New(regOpts, log.With("component", "registrar")); err != nil {
		return nil, err
	}
	a.sip.Handle(sip.REGISTER, a.reg.HandleRegister)
	if a.db != nil {
		// The registrations a load wrote leave the database's pages in the
		// process's map; they go back with the load's heap.
		d, dlog := a.db, log.With("component", "db")
		a.sip.OnLoadOver(func() {
			if err := d.ReleaseMapped(); err != nil {
				dlog.Warn("database pages not released", "err", err)
			}
		})
	}
	if mwi.Enabled(cfg) {
		mo := mwi.Options{SIP: a.sip, Auth: auth, OnAuthFailure: onAuthFailure, OnAuthSuccess: a.guard.OnAuthSuccess}
		if a.db != nil {
			mo.Store = a.db.Subscriptions()
		}
		if a.mwi, err = mwi.New(cfg, a.dir, mo, log.With("component", "mwi")); err != nil {
			return nil, err
		}
		if a.vm != nil {
			vm := a.vm
			a.mwi.SetCounts(func(tenant, ext string) (int, int) {
				n, saved, err := vm.Counts(tenant, ext)
				if err != nil {
					log.Warn("message count not read for a lamp", "tenant", tenant, "extension", ext, "err", err)
				}
				return n, saved
			})
		}
	}

	mediaOpts := rtpcore.Options{BindIP: mediaBindIP(sys.SIP.Transports), PortMin: sys.Media.RTPPortMin, PortMax: sys.Media.RTPPortMax,
		Quarantine: sys.Media.PortQuarantine.D()}
	mediaOpts.MaxPorts = boundMediaPorts(sys.Media.RTPPortMin, sys.Media.RTPPortMax, log.With("component", "media"))
	if mediaOpts.Quarantine == 0 {
		mediaOpts.Quarantine = -1 // 0s in the configuration: no rest at all
	}
	if sys.Media.ExternalIP != "" {
		mediaOpts.AdvertiseIP, _ = netip.ParseAddr(sys.Media.ExternalIP)
	}
	if a.media, err = rtpcore.New(mediaOpts, log.With("component", "media")); err != nil {
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
	mo := mobile.Options{Blocks: mobile.BlocksOf(cfg), Devices: opts.Devices, Webhooks: opts.Webhooks, GrantTTL: grantTTLTestKnob()}
	if mo.Devices == nil && a.devices != nil {
		mo.Devices = a.devices
	}
	if mo.Webhooks == nil {
		mo.Webhooks = ringingHooks{a.hooks}
	}
	a.mobile = mobile.New(mo, log.With("component", "mobile"))
	dpOpts := dialplan.Options{Config: cfg, Directory: a.dir, Registrar: a.reg, SIP: a.sip, Trunks: a.trunks, Limits: a.limits,
		Mobile: a.mobile, OnGrantFailure: func() { a.guard.RecordAuthFailure(netip.AddrPort{}) }} // counted, tied to no address
	if a.vm != nil && sys.Voicemail.Enabled {
		set, err := prompts.Load(cfg.Path(sys.Voicemail.PromptsDir), log.With("component", "voicemail"))
		if err != nil {
			return nil, fmt.Errorf("voicemail: %w", err)
		}
		dpOpts.Voicemail = newMailboxes(cfg, a.vm, set, onAuthFailure, log.With("component", "voicemail"))
	}
	rt := dialplan.New(dpOpts, log.With("component", "routing"))
	obs := observers{newMediaLog(log.With("component", "media"))}
	if a.rec != nil { // before the call log, which writes its record step
		policy := recording.NewPolicy(cfg)
		if a.upl != nil {
			policy.LimitBacklog(sys.Recording.MaxPending, a.upl.Pending)
		}
		obs = append(obs, newCallRecorder(policy, a.rec, rt.Steps(), lv.recording, log.With("component", "recording")))
	}
	if a.cdr != nil {
		obs = append(obs, &callLog{store: a.cdr, log: log.With("component", "cdr"), steps: rt.Steps().Get, hooks: a.hooks})
	}
	obs = append(obs, rt.Steps()) // after the call log, which reads the steps
	obs = append(obs, a.mobile)   // ends mobile offers (mobile.ended, room deletion)
	obs = append(obs, a.limits)   // gives back the call limits reserved by Limiter.ReserveCall
	obs = append(obs, lv)         // publishes on the event bus; nothing else joins this chain
	if a.calls, err = b2bua.New(b2bua.Options{
		SIP:           a.sip,
		Media:         a.media,
		Auth:          auth,
		Router:        rt,
		Identify:      rt.Identify,
		Codecs:        codecs,
		Observer:      obs,
		MediaTimeout:  sys.Media.Timeout.D(),
		MinSE:         sessionMinSETestKnob(),
		OnAuthFailure: onAuthFailure,
		OnAuthSuccess: a.guard.OnAuthSuccess,
		MusicOnHold:   moh.Load(cfg, log.With("component", "moh")),
	}, log.With("component", "calls")); err != nil {
		return nil, err
	}
	limitsLog := log.With("component", "limits")
	a.limits.OnExhausted(func(id b2bua.CallID, err error) {
		limitsLog.Info("call cut: outbound minutes spent", "call", id, "err", err)
		_ = a.calls.End(id, err.Error())
	})

	src := &apiSources{started: time.Now(), cfg: cfg, dir: a.dir, reg: a.reg, calls: a.calls, trunks: a.trunks, cdr: a.cdr, uploads: a.upl}
	a.src = src
	backends := src.backends()
	backends.Guard = guardSource{a.guard}
	backends.Events = a.bus
	backends.Media = mediaSource{a.media}
	backends.SIP = sipSource{a.sip}
	if a.cdr != nil {
		backends.CallLog = a.cdr
		backends.CallLogStats = callLogStats{a.cdr}
	}
	if a.rec != nil {
		backends.Recordings = a.rec
	}
	if a.vm != nil {
		backends.Voicemail = a.vm
	}
	backends.Webhooks = webhookStats{a.hooks}
	if a.devices != nil {
		backends.Devices = mobileweb.Operator(a.devices)
	}
	if a.web, err = web.New(web.Options{API: sys.API, Backends: backends, Mobile: deviceAPI(cfg, a.devices, backends.CallLog, a.vm, a.mobile)}, log.With("component", "api")); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if a.web.Enabled() {
		if err := a.web.Listen(); err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
	}
	return a, nil
}

// mediaBindIP binds RTP where SIP listens when every listener names one address
// (a loopback-only PBX keeps its media on loopback too), else on every address.
func mediaBindIP(ls []config.Listener) netip.Addr {
	var ip netip.Addr
	for i, l := range ls {
		a, err := netip.ParseAddr(l.BindHost)
		if err != nil || (i > 0 && a != ip) {
			return netip.IPv4Unspecified()
		}
		ip = a
	}
	if !ip.IsValid() {
		return netip.IPv4Unspecified()
	}
	return ip
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
