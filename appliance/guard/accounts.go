package guard

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"pbx/appliance/config"
)

// DefaultAccountTrust is how long a source stays trusted for an account
// after it authenticated successfully: a day, longer than any phone's
// registration interval.
const DefaultAccountTrust = 24 * time.Hour

const (
	// maxAccounts bounds the account table; only existing accounts are
	// tracked, so it is reached only with that many accounts.
	maxAccounts = 1 << 16
	// maxTrustedPerAccount bounds the sources remembered per account; the
	// least recently successful is forgotten first.
	maxTrustedPerAccount = 8
)

// AccountOptions completes security.accountFailures, accountWindow and
// accountLock for the account lock.
type AccountOptions struct {
	// Trust is how long a successful authentication keeps its source
	// trusted for the account.
	Trust time.Duration
	// trusted for the account; 0 means DefaultAccountTrust.
	// Tenant names the tenant of an account; ok false for an account that
	// does not exist, whose failures are not counted against any account.
	// nil keys accounts by the SIP domain itself.
	Tenant func(domain, username string) (tenant string, ok bool)
}

// accountLimits is the account lock's configuration.
type accountLimits struct {
	failures     int // 0: never lock
	window, lock time.Duration
	trust        time.Duration
	tenant       func(domain, username string) (string, bool)
}

// account is what the guard remembers of one account. Times are offsets
// from the guard's epoch.
type account struct {
	failures []time.Duration // the most recent failures, oldest first, at most Failures
	until    time.Duration   // locked while later than now
	trusted  []trustedSource // most recently successful last
}

type trustedSource struct {
	addr netip.Addr
	at   time.Duration
}

// accounts is the account table.
type accounts struct {
	opts accountLimits

	mu sync.Mutex
	m  map[accountKey]*account

	lockLog, refuseLog rateLog
}

func (t *accounts) init(sec config.Security, o AccountOptions) {
	t.opts = accountLimits{failures: sec.AccountFailures, window: sec.AccountWindow.D(), lock: sec.AccountLock.D(),
		trust: o.Trust, tenant: o.Tenant}
	if t.opts.trust <= 0 {
		t.opts.trust = DefaultAccountTrust
	}
	t.m = map[accountKey]*account{}
}

// key resolves the account tried; false for one that does not exist.
func (t *accounts) key(domain, username string) (accountKey, bool) {
	if t.opts.tenant == nil {
		return accountKey{domain, username}, username != ""
	}
	tenant, ok := t.opts.tenant(domain, username)
	return accountKey{tenant, username}, ok
}

// get returns the entry of k, creating it unless the table is full.
// t.mu must be held.
func (t *accounts) get(k accountKey, now time.Duration) *account {
	a := t.m[k]
	if a == nil {
		if len(t.m) >= maxAccounts {
			t.sweep(now)
			if len(t.m) >= maxAccounts {
				return nil
			}
		}
		a = &account{}
		t.m[k] = a
	}
	return a
}

// trusts reports whether addr authenticated successfully for a within the
// trust period.
func (t *accounts) trusts(a *account, addr netip.Addr, now time.Duration) bool {
	for _, ts := range a.trusted {
		if ts.addr == addr && now-ts.at < t.opts.trust {
			return true
		}
	}
	return false
}

// recordAccountFailure counts wrong credentials from src against the
// account they named and locks the account when the failures reach
// the threshold within the window. Sources exempt from banning do not
// count; nor do accounts that do not exist.
func (g *Guard) recordAccountFailure(src netip.Addr, domain, username string) {
	t := &g.accounts
	if !g.enabled || t.opts.failures <= 0 || g.exempt(src) {
		return
	}
	k, ok := t.key(domain, username)
	if !ok {
		return
	}
	now := g.clock()
	t.mu.Lock()
	a := t.get(k, now)
	if a == nil {
		t.mu.Unlock()
		return
	}
	g.accountFails.Add(1)
	if len(a.failures) == t.opts.failures {
		a.failures = slices.Delete(a.failures, 0, 1)
	}
	a.failures = append(a.failures, now)
	locked := len(a.failures) == t.opts.failures && now-a.failures[0] < t.opts.window
	fresh := locked && a.until <= now
	if locked {
		a.until = now + t.opts.lock
	}
	until := a.until
	t.mu.Unlock()
	if fresh {
		g.accountLocks.Add(1)
		t.lockLog.note(now, func(n uint64) {
			g.log.Warn("account locked against password guessing", "tenant", k.tenant, "username", k.account,
				"failures", t.opts.failures, "within", t.opts.window.String(),
				"until", g.at(until).UTC().Format(time.RFC3339), "remote", src.String(), "locks", n)
		})
	}
}

// OnAuthSuccess has the shape of the registrar's and the call manager's
// OnAuthSuccess hooks: src presented valid credentials for username in
// domain. It reports false, refusing them, while the account is locked
// against password guessing and src has not authenticated successfully
// for it within the trust period; otherwise it trusts src for the account
// from now on and reports true.
func (g *Guard) OnAuthSuccess(src netip.AddrPort, domain, username string) bool {
	t := &g.accounts
	addr := src.Addr().Unmap()
	if !g.enabled || t.opts.failures <= 0 || g.exempt(addr) {
		return true
	}
	k, ok := t.key(domain, username)
	if !ok {
		return true
	}
	now := g.clock()
	t.mu.Lock()
	a := t.get(k, now)
	if a == nil {
		t.mu.Unlock()
		return true
	}
	if a.until > now && !t.trusts(a, addr, now) {
		t.mu.Unlock()
		g.accountRefused.Add(1)
		t.refuseLog.note(now, func(n uint64) {
			g.log.Warn("valid credentials refused: account locked against password guessing",
				"tenant", k.tenant, "username", k.account, "remote", addr.String(), "refused", n)
		})
		return false
	}
	a.trusted = slices.DeleteFunc(a.trusted, func(ts trustedSource) bool { return ts.addr == addr })
	if len(a.trusted) == maxTrustedPerAccount {
		a.trusted = slices.Delete(a.trusted, 0, 1)
	}
	a.trusted = append(a.trusted, trustedSource{addr, now})
	t.mu.Unlock()
	return true
}

// sweep forgets expired trust and the accounts left with nothing to
// remember. t.mu must be held.
func (t *accounts) sweep(now time.Duration) {
	for k, a := range t.m {
		a.trusted = slices.DeleteFunc(a.trusted, func(ts trustedSource) bool { return now-ts.at >= t.opts.trust })
		recent := len(a.failures) > 0 && now-a.failures[len(a.failures)-1] < t.opts.window
		if a.until <= now && !recent && len(a.trusted) == 0 {
			delete(t.m, k)
		}
	}
}

// sweepAccounts is the janitor's pass over the account table.
func (g *Guard) sweepAccounts() {
	now := g.clock()
	g.accounts.mu.Lock()
	g.accounts.sweep(now)
	g.accounts.mu.Unlock()
}

// accountCounters fills the account fields of c.
func (g *Guard) accountCounters(c *Counters, now time.Duration) {
	c.AccountFailures, c.AccountLocks, c.AccountRefused = g.accountFails.Load(), g.accountLocks.Load(), g.accountRefused.Load()
	g.accounts.mu.Lock()
	for _, a := range g.accounts.m {
		if a.until > now {
			c.AccountsLocked++
		}
	}
	g.accounts.mu.Unlock()
}
