package guard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pbx/appliance/config"
)

// TestDistributedGuessingLocksAccount: 500 sources guessing one account,
// 4 tries each (below the per-source ban), lock the account after 10
// failures within 10 minutes: valid credentials from a source that has not
// authenticated for it are refused for the cooling period, while the phone
// that authenticated from its own address keeps working.
func TestDistributedGuessingLocksAccount(t *testing.T) {
	sec := security()
	sec.AuthFailures = 5
	g, clk, log := newLoggedGuard(t, Options{Security: sec})
	phone := ap("192.0.2.10:5060")
	if !g.OnAuthSuccess(phone, "acme.example", "alice") {
		t.Fatal("the phone refused before any failure")
	}
	for i := range 500 {
		src := addr4(i)
		for range 4 {
			g.OnAuthFailure(src, "acme.example", "alice")
		}
		if i == 1 {
			// 8 failures: not yet locked.
			if !g.OnAuthSuccess(addr4(9999), "acme.example", "alice") {
				t.Fatal("account locked after 8 failures, want 10")
			}
		}
	}
	c := g.Counters()
	if c.BansIssued != 0 || c.AccountFailures != 2000 || c.AccountLocks != 1 || c.AccountsLocked != 1 {
		t.Fatalf("counters %+v, want no ban, 2000 account failures, one lock", c)
	}
	for _, src := range []string{"203.0.113.9:5060", "10.0.0.7:5060"} {
		if g.OnAuthSuccess(ap(src), "acme.example", "alice") {
			t.Fatalf("valid credentials from %s accepted while the account is locked", src)
		}
	}
	if !g.OnAuthSuccess(phone, "acme.example", "alice") {
		t.Fatal("the phone that authenticated from its own address was locked out")
	}
	if !g.OnAuthSuccess(ap("203.0.113.9:5060"), "acme.example", "bob") {
		t.Fatal("another account locked")
	}
	if !g.OnAuthSuccess(ap("203.0.113.9:5060"), "other.example", "alice") {
		t.Fatal("the same username in another domain locked")
	}
	if c := g.Counters(); c.AccountRefused != 2 {
		t.Fatalf("refused %d, want 2", c.AccountRefused)
	}
	if n := strings.Count(log.String(), `msg="account locked`); n != 1 ||
		!strings.Contains(log.String(), "username=alice") {
		t.Fatalf("want one lock line naming the account:\n%s", log)
	}
	if n := strings.Count(log.String(), "valid credentials refused"); n != 1 {
		t.Fatalf("%d refusal lines, want 1 (rate limited):\n%s", n, log)
	}
	// The lock lasts 10 minutes after the last failure.
	clk.Advance(config.DefaultAccountLock - time.Second)
	if g.OnAuthSuccess(ap("203.0.113.9:5060"), "acme.example", "alice") {
		t.Fatal("lock ended early")
	}
	clk.Advance(time.Second)
	if !g.OnAuthSuccess(ap("203.0.113.9:5060"), "acme.example", "alice") {
		t.Fatal("lock did not end after the cooling period")
	}
	if c := g.Counters(); c.AccountsLocked != 0 {
		t.Fatalf("%d accounts locked after the cooling period", c.AccountsLocked)
	}
}

// TestAccountLockNeedsFailuresInsideWindow: 10 failures spread over more
// than the window do not lock; guessing at an account that does not exist
// is not tracked per account.
func TestAccountLockNeedsFailuresInsideWindow(t *testing.T) {
	sec := security()
	known := func(domain, username string) (string, bool) { return "acme", username == "alice" }
	g, clk, _ := newLoggedGuard(t, Options{Security: sec, Accounts: AccountOptions{Tenant: known}})
	for i := range 20 {
		g.OnAuthFailure(addr4(i), "acme.example", "alice")
		clk.Advance(config.DefaultAccountWindow/9 + time.Second)
	}
	if !g.OnAuthSuccess(ap("203.0.113.9:5060"), "acme.example", "alice") {
		t.Fatal("locked by failures spread beyond the window")
	}
	for i := range 100 {
		g.OnAuthFailure(addr4(i), "acme.example", fmt.Sprint("nobody", i))
	}
	g.accounts.mu.Lock()
	n := len(g.accounts.m)
	g.accounts.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d accounts tracked, want alice only", n)
	}
	// Trust and failures expire: the janitor forgets alice a day later.
	clk.Advance(DefaultAccountTrust)
	g.sweepAccounts()
	g.accounts.mu.Lock()
	n = len(g.accounts.m)
	g.accounts.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d accounts remembered after the trust period", n)
	}
}

// TestAccountLockOff: with the guard disabled, or accountFailures 0,
// failures are counted but nothing is locked; a smaller accountFailures
// locks sooner.
func TestAccountLockOff(t *testing.T) {
	off := security()
	off.Enabled = false
	zero := security()
	zero.AccountFailures = 0
	three := security()
	three.AccountFailures = 3
	for name, tc := range map[string]struct {
		sec    config.Security
		locked bool
	}{"disabled": {off, false}, "accountFailures 0": {zero, false}, "accountFailures 3": {three, true}} {
		g, _ := newGuard(t, tc.sec)
		for i := range 3 {
			g.OnAuthFailure(addr4(i), "acme.example", "alice")
		}
		if got := !g.OnAuthSuccess(ap("203.0.113.9:5060"), "acme.example", "alice"); got != tc.locked {
			t.Errorf("%s: locked %v, want %v", name, got, tc.locked)
		}
		if c := g.Counters(); c.AuthFailures != 3 {
			t.Errorf("%s: counters %+v", name, c)
		}
	}
}
