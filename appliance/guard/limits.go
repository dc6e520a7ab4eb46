package guard

import (
	"fmt"
	"math"
	"sync"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

// Release gives a reservation back when its call ends. billed is how long
// the call was answered (zero when it never was); for an outbound call it is
// added to the tenant's outbound minutes. Calling it again does nothing.
type Release func(billed time.Duration)

// Limiter enforces security.limits on calls: it reserves a call once its
// tenant is known and gives the reservation back when the call ends. It is
// safe for concurrent use.
//
// With the b2bua manager, the Limiter is one of its observers and the
// router calls ReserveCall once routing has named the tenant:
//
//	account := "" // per-account limits apply to authenticated endpoints
//	if in.Caller.Kind == b2bua.KindEndpoint {
//		account = in.Caller.Username
//	}
//	if err := limits.ReserveCall(in.ID, tenant, account, outbound); err != nil {
//		// refuse the call, e.g. 503 for ErrConcurrentCalls and
//		// ErrConcurrentPerAccount, 403 for the outbound limits
//	}
type Limiter struct {
	now     func() time.Time
	sys     config.Limits
	tenants map[string]config.Limits

	mu       sync.Mutex
	use      map[string]*tenantUse
	accounts map[accountKey]int
	held     map[b2bua.CallID]Release
}

type accountKey struct{ tenant, account string }

type tenantUse struct {
	active int

	setups     float64 // outbound setup tokens
	setupsSeen time.Time

	hour      [60]minuteSlot // seconds used, by minute of the clock
	month     int            // year*12 + month (UTC) that monthSecs counts
	monthSecs float64
}

type minuteSlot struct {
	minute int64 // Unix minute
	secs   float64
}

// NewLimiter builds a Limiter from the System's security.limits and each
// tenant's override. now nil means time.Now.
func NewLimiter(cfg *config.Config, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	l := &Limiter{
		now: now, sys: cfg.System.Security.Limits, tenants: map[string]config.Limits{},
		use: map[string]*tenantUse{}, accounts: map[accountKey]int{}, held: map[b2bua.CallID]Release{},
	}
	for _, t := range cfg.Tenants {
		l.tenants[t.Name] = EffectiveLimits(l.sys, t)
	}
	return l
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

// Reserve admits one more call of tenant, placed by account (empty for a
// caller that is no authenticated endpoint, such as a trunk), or refuses it
// with one of ErrConcurrentCalls, ErrConcurrentPerAccount,
// ErrOutboundPerMinute, ErrMinutesPerHour, ErrMinutesPerMonth (wrapped with
// the limit's value). An outbound call also takes one outbound setup.
func (l *Limiter) Reserve(tenant, account string, outbound bool) (Release, error) {
	lim := l.Limits(tenant)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.tenantUse(tenant)
	ak := accountKey{tenant, account}
	if lim.MaxConcurrentCalls > 0 && u.active >= lim.MaxConcurrentCalls {
		return nil, fmt.Errorf("%w (%d calls)", ErrConcurrentCalls, lim.MaxConcurrentCalls)
	}
	if account != "" && lim.MaxConcurrentPerAccount > 0 && l.accounts[ak] >= lim.MaxConcurrentPerAccount {
		return nil, fmt.Errorf("%w (%d calls)", ErrConcurrentPerAccount, lim.MaxConcurrentPerAccount)
	}
	if outbound {
		if m := lim.OutboundMinutesPerHour; m > 0 && u.hourSecs(now) >= float64(m)*60 {
			return nil, fmt.Errorf("%w (%d minutes)", ErrMinutesPerHour, m)
		}
		if m := lim.OutboundMinutesPerMonth; m > 0 && u.monthUsed(now) >= float64(m)*60 {
			return nil, fmt.Errorf("%w (%d minutes)", ErrMinutesPerMonth, m)
		}
		if r := lim.MaxOutboundPerMinute; r > 0 {
			if !u.takeSetup(now, r) {
				return nil, fmt.Errorf("%w (%g per minute)", ErrOutboundPerMinute, r)
			}
		}
	}
	u.active++
	if account != "" {
		l.accounts[ak]++
	}
	var once sync.Once
	return func(billed time.Duration) {
		once.Do(func() { l.release(tenant, ak, outbound, billed) })
	}, nil
}

func (l *Limiter) release(tenant string, ak accountKey, outbound bool, billed time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.tenantUse(tenant)
	u.active--
	if ak.account != "" {
		if l.accounts[ak]--; l.accounts[ak] <= 0 {
			delete(l.accounts, ak)
		}
	}
	if outbound && billed > 0 {
		u.add(now, billed)
	}
}

// AddOutbound counts billed outbound time of tenant that no reservation
// carries.
func (l *Limiter) AddOutbound(tenant string, billed time.Duration) {
	if billed <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	l.tenantUse(tenant).add(now, billed)
	l.mu.Unlock()
}

// Usage is what a tenant has in use.
type Usage struct {
	Active             int     // calls reserved and not released
	OutboundHourMins   float64 // outbound minutes in the last hour
	OutboundMonthMins  float64 // outbound minutes this calendar month (UTC)
	OutboundSetupsLeft float64 // outbound setups available now (when limited)
}

// Usage reports tenant's current use.
func (l *Limiter) Usage(tenant string) Usage {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.tenantUse(tenant)
	use := Usage{Active: u.active, OutboundHourMins: u.hourSecs(now) / 60, OutboundMonthMins: u.monthUsed(now) / 60}
	if r := l.Limits(tenant).MaxOutboundPerMinute; r > 0 {
		use.OutboundSetupsLeft = u.setupsAt(now, r)
	}
	return use
}

// ReserveCall is Reserve for a call the b2bua manager runs: the reservation
// is held under id and given back by CallEvent when the call ends, with the
// call's answered time as billed. Call it from the router once the call's
// tenant is known.
func (l *Limiter) ReserveCall(id b2bua.CallID, tenant, account string, outbound bool) error {
	rel, err := l.Reserve(tenant, account, outbound)
	if err != nil {
		return err
	}
	l.mu.Lock()
	prev := l.held[id]
	l.held[id] = rel
	l.mu.Unlock()
	if prev != nil {
		prev(0)
	}
	return nil
}

// CallEvent gives a call's reservation back when it ends; the Limiter is
// a b2bua.Observer.
func (l *Limiter) CallEvent(ev b2bua.Event) {
	if ev.Kind != b2bua.EventEnded {
		return
	}
	l.mu.Lock()
	rel := l.held[ev.Call.ID]
	delete(l.held, ev.Call.ID)
	l.mu.Unlock()
	if rel == nil {
		return
	}
	var billed time.Duration
	if c := ev.Call; !c.Answer.IsZero() && c.End.After(c.Answer) {
		billed = c.End.Sub(c.Answer)
	}
	rel(billed)
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

func monthOf(t time.Time) int {
	t = t.UTC()
	return t.Year()*12 + int(t.Month()) - 1
}

func (u *tenantUse) hourSecs(now time.Time) float64 {
	m := now.Unix() / 60
	var s float64
	for _, sl := range u.hour {
		if sl.minute > m-60 && sl.minute <= m {
			s += sl.secs
		}
	}
	return s
}

func (u *tenantUse) monthUsed(now time.Time) float64 {
	if u.month != monthOf(now) {
		return 0
	}
	return u.monthSecs
}

func (u *tenantUse) add(now time.Time, billed time.Duration) {
	m := now.Unix() / 60
	sl := &u.hour[m%60]
	if sl.minute != m {
		*sl = minuteSlot{minute: m}
	}
	sl.secs += billed.Seconds()
	if mo := monthOf(now); u.month != mo {
		u.month, u.monthSecs = mo, 0
	}
	u.monthSecs += billed.Seconds()
}
