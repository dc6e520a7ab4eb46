package appliance

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/datadir"
	"pbx/appliance/dialplan"
	"pbx/appliance/guard"
	"pbx/appliance/mobile"
	"pbx/appliance/moh"
	"pbx/appliance/mwi"
	"pbx/appliance/prompts"
	"pbx/appliance/recording"
	"pbx/db"
	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
	"pbx/web"
	mobileweb "pbx/web/mobile"
)

// The steps of New, in the order it takes them. A step that builds one part
// returns it with its error, and New stores it in the Appliance even when the
// error is set, as the part's constructor returned it; a step that builds
// several parts in turn (openDataDir) stores each as it is built. Either way a
// later failure leaves in the Appliance everything Close must release.

// openDataDir takes the data directory and opens what lives in it: the lock,
// the database, the call records (recovered before any listener opens), the
// recordings and the voicemail store.
func (a *Appliance) openDataDir(dd string) (err error) {
	cfg, log := a.cfg, a.log
	if err := os.MkdirAll(dd, 0o750); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if a.lock, err = datadir.Lock(dd); err != nil {
		return err
	}
	if a.db, err = db.Open(dd, db.Options{}, log.With("component", "db")); err != nil {
		return err
	}
	if cfg.System.CDR.Enabled {
		if a.cdr, err = a.openCDR(dd); err != nil {
			return err
		}
	}
	if recording.Enabled(cfg) {
		if a.rec, a.upl, err = newRecordings(dd, cfg, a.cdr, log.With("component", "recording")); err != nil {
			return err
		}
	}
	if hasMailboxes(cfg) {
		if a.vm, a.notices, err = newVoicemail(dd, cfg, a.mailboxChanged, log.With("component", "voicemail")); err != nil {
			return err
		}
	}
	return nil
}

// openCDR opens the call record store and recovers the records a crash left
// in flight, logging what recovery did; a failed recovery returns the store
// with the error.
func (a *Appliance) openCDR(dd string) (*cdr.Store, error) {
	cfg, log := a.cfg, a.log
	store, err := cdr.New(cdrTestKnobs(cdr.Options{DataDir: dd, Location: cfg.LocationFunc(), Retention: cfg.System.CDR.Retention.D(),
		MaxOpenFiles: recordFileBudget(openFileLimit())}), log.With("component", "cdr"))
	if err != nil {
		return store, err
	}
	// Recovery runs before any listener opens.
	actions, err := store.Recover(context.Background())
	if err != nil {
		return store, fmt.Errorf("call record recovery: %w", err)
	}
	for _, act := range actions {
		log.Warn("call record recovery", "action", act.String())
	}
	return store, nil
}

// newGuard builds the guard and the call limiter; with a database the
// limiter's minutes budgets are persisted there. A failed persistence returns
// the limiter with the error, for Close to flush.
func (a *Appliance) newGuard(lv live) (*guard.Guard, *guard.Limiter, error) {
	cfg := a.cfg
	// The guard always runs: disabled, it admits everything but still counts.
	accounts := guard.AccountOptions{Tenant: a.dir.SIPAccounts().TenantOf}
	g, err := guard.New(guard.Options{Security: cfg.System.Security, Accounts: accounts, OnBan: lv.ban, OnLift: lv.lift}, a.log.With("component", "guard"))
	if err != nil {
		return g, nil, fmt.Errorf("security: %w", err)
	}
	limits := guard.NewLimiter(cfg, nil)
	if a.db != nil {
		// Beyond the specification: the minutes budgets survive a restart.
		if err := limits.Persist(a.db.Minutes()); err != nil {
			return g, limits, fmt.Errorf("security limits: %w", err)
		}
	}
	return g, limits, nil
}

// newSIP binds the SIP listeners, admitting through the guard.
func (a *Appliance) newSIP() (*sipcore.Server, error) {
	sys, log := &a.cfg.System, a.log
	// sipgo's own log lines (transport warnings) go to our logger, not slog's default.
	sip.SetDefaultLogger(sipcore.SIPStackLogger(log.With("component", "sipgo")))
	var listeners []sipcore.Listener
	for _, l := range sys.SIP.Transports {
		listeners = append(listeners, sipcore.Listener{ID: l.ID, Transport: l.Transport, BindHost: l.BindHost, BindPort: l.BindPort})
	}
	return sipcore.New(sipcore.Options{
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
	}, log.With("component", "sip"))
}

// newRegistrar builds the registrar, its bindings kept in the database when
// there is one, and hands it the REGISTER requests.
func (a *Appliance) newRegistrar(auth *registrar.Auth, onAuthFailure func(netip.AddrPort, string, string), lv live) (*registrar.Registrar, error) {
	log := a.log
	regOpts := registrar.Options{Auth: auth, OnAuthFailure: onAuthFailure, OnAuthSuccess: a.guard.OnAuthSuccess, SIP: a.sip, OnChange: lv.binding}
	if a.db != nil {
		regOpts.Store = a.db.Registrations()
	}
	reg, err := registrar.New(regOpts, log.With("component", "registrar"))
	if err != nil {
		return reg, err
	}
	a.sip.Handle(sip.REGISTER, reg.HandleRegister)
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
	return reg, nil
}

// newMWI builds message waiting, its subscriptions kept in the database when
// there is one and its counts read from the voicemail store.
func (a *Appliance) newMWI(auth *registrar.Auth, onAuthFailure func(netip.AddrPort, string, string)) (*mwi.Service, error) {
	log := a.log
	mo := mwi.Options{SIP: a.sip, Auth: auth, OnAuthFailure: onAuthFailure, OnAuthSuccess: a.guard.OnAuthSuccess}
	if a.db != nil {
		mo.Store = a.db.Subscriptions()
	}
	svc, err := mwi.New(a.cfg, a.dir, mo, log.With("component", "mwi"))
	if err != nil {
		return svc, err
	}
	if a.vm != nil {
		vm := a.vm
		svc.SetCounts(func(tenant, ext string) (int, int) {
			n, saved, err := vm.Counts(tenant, ext)
			if err != nil {
				log.Warn("message count not read for a lamp", "tenant", tenant, "extension", ext, "err", err)
			}
			return n, saved
		})
	}
	return svc, nil
}

// newMedia builds the RTP engine on the address SIP listens on, with the
// configured port range, quarantine and advertised address.
func newMedia(sys *config.System, log *slog.Logger) (*rtpcore.Engine, error) {
	prio, err := rtpcore.ParsePriority(sys.Media.RelayPriority)
	if err != nil {
		return nil, err // validation lets only the three names through
	}
	mediaOpts := rtpcore.Options{BindIP: mediaBindIP(sys.SIP.Transports), PortMin: sys.Media.RTPPortMin, PortMax: sys.Media.RTPPortMax,
		Quarantine: sys.Media.PortQuarantine.D(), Priority: prio, KernelForwarding: sys.Media.KernelForwarding}
	mediaOpts.MaxPorts = boundMediaPorts(sys.Media.RTPPortMin, sys.Media.RTPPortMax, log)
	if mediaOpts.Quarantine == 0 {
		mediaOpts.Quarantine = -1 // 0s in the configuration: no rest at all
	}
	if sys.Media.ExternalIP != "" {
		mediaOpts.AdvertiseIP, _ = netip.ParseAddr(sys.Media.ExternalIP)
	}
	return rtpcore.New(mediaOpts, log)
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

// newMobile builds the mobile side of calls over the device sessions and the
// webhook dispatcher, unless Options replaced them.
func (a *Appliance) newMobile() *mobile.Service {
	mo := mobile.Options{Blocks: mobile.BlocksOf(a.cfg), Devices: a.opts.Devices, Webhooks: a.opts.Webhooks, GrantTTL: grantTTLTestKnob()}
	if mo.Devices == nil && a.devices != nil {
		mo.Devices = a.devices
	}
	if mo.Webhooks == nil {
		mo.Webhooks = ringingHooks{a.hooks}
	}
	return mobile.New(mo, a.log.With("component", "mobile"))
}

// newDialplan builds the router, with the mailboxes and their prompts when
// voicemail is on.
func (a *Appliance) newDialplan(onAuthFailure func(netip.AddrPort, string, string)) (*dialplan.Dialplan, error) {
	cfg, sys, log := a.cfg, &a.cfg.System, a.log
	dpOpts := dialplan.Options{Config: cfg, Directory: a.dir, Registrar: a.reg, SIP: a.sip, Trunks: a.trunks, Limits: a.limits,
		Mobile: a.mobile, OnGrantFailure: func() { a.guard.RecordAuthFailure(netip.AddrPort{}) }} // counted, tied to no address
	if a.vm != nil && sys.Voicemail.Enabled {
		set, err := prompts.Load(cfg.Path(sys.Voicemail.PromptsDir), log.With("component", "voicemail"))
		if err != nil {
			return nil, fmt.Errorf("voicemail: %w", err)
		}
		dpOpts.Voicemail = newMailboxes(cfg, a.vm, set, onAuthFailure, log.With("component", "voicemail"))
	}
	return dialplan.New(dpOpts, log.With("component", "routing")), nil
}

// callObservers is the chain told of every call's events, in an order that
// matters: the recorder before the call log, which writes its record step;
// the steps after the call log, which reads them; the event bus last.
func (a *Appliance) callObservers(rt *dialplan.Dialplan, lv live) observers {
	cfg, log := a.cfg, a.log
	obs := observers{newMediaLog(log.With("component", "media"))}
	if a.rec != nil { // before the call log, which writes its record step
		policy := recording.NewPolicy(cfg)
		if a.upl != nil {
			policy.LimitBacklog(cfg.System.Recording.MaxPending, a.upl.Pending)
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
	return obs
}

// newCalls builds the call manager over SIP, media and the router.
func (a *Appliance) newCalls(auth *registrar.Auth, rt *dialplan.Dialplan, codecs []sdp.Codec, obs observers, onAuthFailure func(netip.AddrPort, string, string)) (*b2bua.Manager, error) {
	cfg, log := a.cfg, a.log
	return b2bua.New(b2bua.Options{
		SIP:           a.sip,
		Media:         a.media,
		Auth:          auth,
		Router:        rt,
		Identify:      rt.Identify,
		Codecs:        codecs,
		Observer:      obs,
		MediaTimeout:  cfg.System.Media.Timeout.D(),
		MinSE:         sessionMinSETestKnob(),
		OnAuthFailure: onAuthFailure,
		OnAuthSuccess: a.guard.OnAuthSuccess,
		MusicOnHold:   moh.Load(cfg, log.With("component", "moh")),
	}, log.With("component", "calls"))
}

// newAPI builds the HTTP API over a.src and the other parts, and binds it
// when it is enabled. A failed bind returns the server with the error.
func (a *Appliance) newAPI() (*web.Server, error) {
	backends := a.src.backends()
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
	w, err := web.New(web.Options{API: a.cfg.System.API, Backends: backends, Mobile: deviceAPI(a.cfg, a.devices, backends.CallLog, a.vm, a.mobile)}, a.log.With("component", "api"))
	if err != nil {
		return w, err
	}
	if w.Enabled() {
		if err := w.Listen(); err != nil {
			return w, err
		}
	}
	return w, nil
}
