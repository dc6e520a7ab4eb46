package guard

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"pbx/appliance/config"
	"pbx/db"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// Release gives a reservation back when its call ends. Calling it again
// does nothing.
type Release func()

// Claim is what one call takes under security.limits.
type Claim struct {
	// Tenant handles the call (routing's tenant): the call takes one of its
	// maxConcurrentCalls and, when Outbound, its outbound setups and minutes.
	Tenant string
	// CallerTenant is the calling phone's own tenant when that is not
	// Tenant (an inter-tenant call): the call takes one of its
	// maxConcurrentCalls too.
	CallerTenant string
	// Account is the calling phone's account (empty for a trunk or the
	// room-service bridge), counted under maxConcurrentPerAccount of its own
	// tenant: CallerTenant, else Tenant.
	Account string
	// Outbound: a leg of the call leaves on a trunk (an outbound call, or
	// one forwarded to a carrier).
	Outbound bool
}

// accountTenant is the tenant the claim's account belongs to.
func (c Claim) accountTenant() string {
	if c.CallerTenant != "" {
		return c.CallerTenant
	}
	return c.Tenant
}

// MinutesStore keeps the outbound minutes counters across restarts
// (db.MinutesCounters).
type MinutesStore interface {
	LoadMinutes() (map[string]db.Minutes, error)
	SaveMinutes(map[string]db.Minutes) error
}

// DefaultMeterInterval is how often live outbound calls are metered against
// the minutes budgets; a call is cut at most this long after its tenant's
// budget is spent.
const DefaultMeterInterval = time.Second

// Limiter enforces security.limits on calls: it reserves a call once its
// tenant is known, meters answered outbound calls while they run against
// the tenant's minutes budgets (cutting them through OnExhausted when the
// hour's or the month's budget is spent), and gives the reservation back
// when the call ends. It is safe for concurrent use.
//
// With the b2bua manager, the Limiter is one of its observers and the
// router calls ReserveCall once routing has named the tenant; Run meters.
type Limiter struct {
	now     func() time.Time
	loc     func(tenant string) *time.Location
	sys     config.Limits
	tenants map[string]config.Limits
	store   MinutesStore // nil: counters in memory only
	cut     func(b2bua.CallID, error)

	mu       sync.Mutex
	use      map[string]*tenantUse
	accounts map[accountKey]int
	held     map[b2bua.CallID]*hold
	dirty    map[string]bool // tenants whose minutes changed since the last save
}

type accountKey struct{ tenant, account string }

type tenantUse struct {
	active int

	setups     float64 // outbound setup tokens
	setupsSeen time.Time

	minutes minutes
}

// hold is a live call's reservation.
type hold struct {
	release  Release
	tenant   string // whose minutes it uses
	outbound bool
	metered  time.Time // answered and counted up to here; zero before answer
	cut      bool      // asked to end for a spent budget
	// A transfer's new leg holds its own place: pending while it rings,
	// then among more once answered, given back with the call.
	pending *hold
	more    []*hold
}

// metering reports whether h or a transfer leg of it is metered.
func (h *hold) metering() bool {
	if !h.metered.IsZero() {
		return true
	}
	for _, m := range h.more {
		if !m.metered.IsZero() {
			return true
		}
	}
	return false
}

// NewLimiter builds a Limiter from the System's security.limits and each
// tenant's override; minutes count in each tenant's time zone. now nil
// means time.Now.
func NewLimiter(cfg *config.Config, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	l := &Limiter{
		now: now, loc: cfg.LocationFunc(), sys: cfg.System.Security.Limits, tenants: map[string]config.Limits{},
		use: map[string]*tenantUse{}, accounts: map[accountKey]int{}, held: map[b2bua.CallID]*hold{}, dirty: map[string]bool{},
	}
	for _, t := range cfg.Tenants {
		l.tenants[t.Name] = EffectiveLimits(l.sys, t)
	}
	return l
}

// Persist loads the minutes counters from store and saves them there from
// then on (by Run and Flush). Call it before the first call.
func (l *Limiter) Persist(store MinutesStore) error {
	saved, err := store.LoadMinutes()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.store = store
	for tn, m := range saved {
		l.tenantUse(tn).minutes = minutes(m)
	}
	return nil
}

// OnExhausted sets how a call is ended when its tenant's minutes budget is
// spent: err wraps ErrMinutesPerHour or ErrMinutesPerMonth. Call it before
// Run.
func (l *Limiter) OnExhausted(cut func(id b2bua.CallID, err error)) {
	l.mu.Lock()
	l.cut = cut
	l.mu.Unlock()
}

// EffectiveLimits is the System's limits with each key the tenant's limits
// spell out (or set non-zero) replaced by the tenant's value.
func EffectiveLimits(sys config.Limits, t *config.Tenant) config.Limits {
	eff := sys
	if t == nil || t.Limits == nil {
		return eff
	}
	tl := t.Limits
	set := func(key string, nonZero bool) bool { return nonZero || t.Has("limits."+key) }
	if set("maxConcurrentCalls", tl.MaxConcurrentCalls != 0) {
		eff.MaxConcurrentCalls = tl.MaxConcurrentCalls
	}
	if set("maxConcurrentPerAccount", tl.MaxConcurrentPerAccount != 0) {
		eff.MaxConcurrentPerAccount = tl.MaxConcurrentPerAccount
	}
	if set("maxOutboundPerMinute", tl.MaxOutboundPerMinute != 0) {
		eff.MaxOutboundPerMinute = tl.MaxOutboundPerMinute
	}
	if set("blockedPrefixes", tl.BlockedPrefixes != nil) {
		eff.BlockedPrefixes = tl.BlockedPrefixes
	}
	if set("outboundMinutesPerHour", tl.OutboundMinutesPerHour != 0) {
		eff.OutboundMinutesPerHour = tl.OutboundMinutesPerHour
	}
	if set("outboundMinutesPerMonth", tl.OutboundMinutesPerMonth != 0) {
		eff.OutboundMinutesPerMonth = tl.OutboundMinutesPerMonth
	}
	return eff
}

// Limits returns the limits that apply to tenant (the System's for a
// tenant the configuration does not name).
func (l *Limiter) Limits(tenant string) config.Limits {
	if eff, ok := l.tenants[tenant]; ok {
		return eff
	}
	return l.sys
}

// Reserve admits one more call, or refuses it with one of
// ErrConcurrentCalls, ErrConcurrentPerAccount, ErrOutboundPerMinute,
// ErrMinutesPerHour, ErrMinutesPerMonth (wrapped with the limit's value).
// An outbound call also takes one outbound setup.
func (l *Limiter) Reserve(c Claim) (Release, error) {
	lim := l.Limits(c.Tenant)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.tenantUse(c.Tenant)
	if lim.MaxConcurrentCalls > 0 && u.active >= lim.MaxConcurrentCalls {
		return nil, fmt.Errorf("%w (%d calls)", ErrConcurrentCalls, lim.MaxConcurrentCalls)
	}
	var cu *tenantUse
	if c.CallerTenant != "" && c.CallerTenant != c.Tenant {
		cu = l.tenantUse(c.CallerTenant)
		if m := l.Limits(c.CallerTenant).MaxConcurrentCalls; m > 0 && cu.active >= m {
			return nil, fmt.Errorf("%w (%d calls of tenant %s)", ErrConcurrentCalls, m, c.CallerTenant)
		}
	}
	ak := accountKey{c.accountTenant(), c.Account}
	if m := l.Limits(ak.tenant).MaxConcurrentPerAccount; c.Account != "" && m > 0 && l.accounts[ak] >= m {
		return nil, fmt.Errorf("%w (%d calls)", ErrConcurrentPerAccount, m)
	}
	if c.Outbound {
		if err := l.spent(c.Tenant, u, now); err != nil {
			return nil, err
		}
		if r := lim.MaxOutboundPerMinute; r > 0 {
			if !u.takeSetup(now, r) {
				return nil, fmt.Errorf("%w (%g per minute)", ErrOutboundPerMinute, r)
			}
		}
	}
	u.active++
	if cu != nil {
		cu.active++
	}
	if c.Account != "" {
		l.accounts[ak]++
	}
	var once sync.Once
	return func() {
		once.Do(func() { l.release(c, ak, cu != nil) })
	}, nil
}

// spent says whether tenant's hour or month budget is used up at now.
// l.mu is held.
func (l *Limiter) spent(tenant string, u *tenantUse, now time.Time) error {
	lim := l.Limits(tenant)
	hour, month := u.minutes.used(now, l.loc(tenant))
	if m := lim.OutboundMinutesPerHour; m > 0 && hour >= time.Duration(m)*time.Minute {
		return fmt.Errorf("%w (%d minutes)", ErrMinutesPerHour, m)
	}
	if m := lim.OutboundMinutesPerMonth; m > 0 && month >= time.Duration(m)*time.Minute {
		return fmt.Errorf("%w (%d minutes)", ErrMinutesPerMonth, m)
	}
	return nil
}

func (l *Limiter) release(c Claim, ak accountKey, callerToo bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tenantUse(c.Tenant).active--
	if callerToo {
		l.tenantUse(c.CallerTenant).active--
	}
	if ak.account != "" {
		if l.accounts[ak]--; l.accounts[ak] <= 0 {
			delete(l.accounts, ak)
		}
	}
}

// AddOutbound counts outbound time of tenant that no live call carries,
// ending now.
func (l *Limiter) AddOutbound(tenant string, used time.Duration) {
	if used <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	l.tenantUse(tenant).minutes.add(now.Add(-used), now, l.loc(tenant))
	l.dirty[tenant] = true
	l.mu.Unlock()
}

// Usage is what a tenant has in use.
type Usage struct {
	Active             int     // calls reserved and not released
	OutboundHourMins   float64 // outbound minutes this clock hour (tenant's time zone)
	OutboundMonthMins  float64 // outbound minutes this calendar month (tenant's time zone)
	OutboundSetupsLeft float64 // outbound setups available now (when limited)
}

// Usage reports tenant's current use, live calls metered up to now.
func (l *Limiter) Usage(tenant string) Usage {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.meterLocked(now)
	u := l.tenantUse(tenant)
	hour, month := u.minutes.used(now, l.loc(tenant))
	use := Usage{Active: u.active, OutboundHourMins: hour.Minutes(), OutboundMonthMins: month.Minutes()}
	if r := l.Limits(tenant).MaxOutboundPerMinute; r > 0 {
		use.OutboundSetupsLeft = u.setupsAt(now, r)
	}
	return use
}

// ReserveCall is Reserve for a call the b2bua manager runs: the reservation
// is held under id, metered from its answer when outbound, and given back by
// CallEvent when the call ends. Call it from the router once the call's
// tenant is known.
func (l *Limiter) ReserveCall(id b2bua.CallID, c Claim) error {
	rel, err := l.Reserve(c)
	if err != nil {
		return err
	}
	l.mu.Lock()
	prev := l.held[id]
	l.held[id] = &hold{release: rel, tenant: c.Tenant, outbound: c.Outbound}
	l.mu.Unlock()
	if prev != nil {
		prev.release()
	}
	return nil
}

// ReserveTransfer is ReserveCall for a transfer's new leg of call id (the
// b2bua routes it like a new call): it takes a place of its own next to
// the call's, metered from the transfer's answer when outbound, given back
// at once when the transfer fails, else with the call.
func (l *Limiter) ReserveTransfer(id b2bua.CallID, c Claim) error {
	rel, err := l.Reserve(c)
	if err != nil {
		return err
	}
	h := &hold{release: rel, tenant: c.Tenant, outbound: c.Outbound}
	l.mu.Lock()
	main := l.held[id]
	var prev *hold
	if main == nil {
		l.held[id] = h
	} else {
		prev, main.pending = main.pending, h
	}
	l.mu.Unlock()
	if prev != nil {
		prev.release()
	}
	return nil
}

// transferEnded settles a transfer's pending place. l.mu is held; it
// returns a place to give back.
func (l *Limiter) transferEnded(ev b2bua.Event) *hold {
	h := l.held[ev.Call.ID]
	if h == nil || h.pending == nil || ev.Transfer == nil {
		return nil
	}
	p := h.pending
	h.pending = nil
	if ev.Transfer.Result != calls.CauseAnswered {
		return p
	}
	if p.outbound {
		p.metered = ev.At
	}
	h.more = append(h.more, p)
	return nil
}

// CallEvent starts metering an outbound call when it is answered, and
// counts its last minutes and gives its reservation back when it ends; the
// Limiter is a b2bua.Observer.
func (l *Limiter) CallEvent(ev b2bua.Event) {
	switch ev.Kind {
	case b2bua.EventAnswered:
		l.mu.Lock()
		if h := l.held[ev.Call.ID]; h != nil && h.outbound && h.metered.IsZero() {
			h.metered = ev.Call.Answer
			if h.metered.IsZero() {
				h.metered = l.now()
			}
		}
		l.mu.Unlock()
	case b2bua.EventTransfer:
		l.mu.Lock()
		p := l.transferEnded(ev)
		l.mu.Unlock()
		if p != nil {
			p.release()
		}
	case b2bua.EventEnded:
		l.mu.Lock()
		h := l.held[ev.Call.ID]
		delete(l.held, ev.Call.ID)
		var all []*hold
		if h != nil {
			all = append([]*hold{h}, h.more...)
			if h.pending != nil {
				all = append(all, h.pending)
			}
		}
		end := ev.Call.End
		if end.IsZero() {
			end = l.now()
		}
		for _, x := range all {
			l.meterCall(x, end)
		}
		l.mu.Unlock()
		for _, x := range all {
			x.release()
		}
	}
}

// meterCall counts h's time up to end. l.mu is held.
func (l *Limiter) meterCall(h *hold, end time.Time) {
	if h.metered.IsZero() || !end.After(h.metered) {
		return
	}
	l.tenantUse(h.tenant).minutes.add(h.metered, end, l.loc(h.tenant))
	h.metered = end
	l.dirty[h.tenant] = true
}

// meterLocked counts every answered outbound call's time up to now. l.mu
// is held.
func (l *Limiter) meterLocked(now time.Time) {
	for _, h := range l.held {
		l.meterCall(h, now)
		for _, m := range h.more {
			l.meterCall(m, now)
		}
	}
}

// Meter counts every answered outbound call's time up to now and ends,
// through OnExhausted, the calls of each tenant whose hour's or month's
// budget is spent. Run calls it every DefaultMeterInterval.
func (l *Limiter) Meter() {
	type cutCall struct {
		id  b2bua.CallID
		err error
	}
	now := l.now()
	var cuts []cutCall
	l.mu.Lock()
	l.meterLocked(now)
	for id, h := range l.held {
		if !h.metering() || h.cut {
			continue
		}
		if err := l.spent(h.tenant, l.tenantUse(h.tenant), now); err != nil {
			h.cut = true
			cuts = append(cuts, cutCall{id, err})
		}
	}
	cut := l.cut
	l.mu.Unlock()
	if cut == nil {
		return
	}
	for _, c := range cuts {
		cut(c.id, c.err)
	}
}

// Flush saves the minutes counters that changed since the last save.
func (l *Limiter) Flush() error {
	l.mu.Lock()
	if l.store == nil || len(l.dirty) == 0 {
		l.mu.Unlock()
		return nil
	}
	put := make(map[string]db.Minutes, len(l.dirty))
	for tn := range l.dirty {
		put[tn] = db.Minutes(l.tenantUse(tn).minutes)
	}
	l.dirty = map[string]bool{}
	store := l.store
	l.mu.Unlock()
	if err := store.SaveMinutes(put); err != nil {
		l.mu.Lock()
		for tn := range put {
			l.dirty[tn] = true // try again next time
		}
		l.mu.Unlock()
		return err
	}
	return nil
}

// Run meters live outbound calls every interval (DefaultMeterInterval when
// zero or less) and saves the counters, until ctx ends; it saves once more
// then.
func (l *Limiter) Run(ctx context.Context, interval time.Duration, log *slog.Logger) error {
	if interval <= 0 {
		interval = DefaultMeterInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Meter()
			if err := l.Flush(); err != nil {
				log.Error("save outbound minutes", "err", err)
			}
			return nil
		case <-t.C:
			l.Meter()
			if err := l.Flush(); err != nil {
				log.Error("save outbound minutes", "err", err)
			}
		}
	}
}

func (l *Limiter) tenantUse(tenant string) *tenantUse {
	u := l.use[tenant]
	if u == nil {
		u = &tenantUse{setups: math.NaN()}
		l.use[tenant] = u
	}
	return u
}

// setupsAt refills the outbound setup bucket: rate per minute, holding at
// most max(rate, 1), full at first use.
func (u *tenantUse) setupsAt(now time.Time, rate float64) float64 {
	capacity := math.Max(rate, 1)
	if math.IsNaN(u.setups) {
		return capacity
	}
	el := now.Sub(u.setupsSeen).Minutes()
	if el < 0 {
		el = 0
	}
	return math.Min(capacity, u.setups+el*rate)
}

func (u *tenantUse) takeSetup(now time.Time, rate float64) bool {
	n := u.setupsAt(now, rate)
	if n < 1 {
		return false
	}
	u.setups, u.setupsSeen = n-1, now
	return true
}
