package guard

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

// limitsConfig loads a System with security.limits and two tenants: acme
// overrides two keys (one of them to 0, no limit), globex none.
func limitsConfig(t *testing.T, system, acme string) *config.Config {
	t.Helper()
	doc := fmt.Sprintf(`configVersion: pbx/v1
kind: System
spec:
  security:
    limits:
%s
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: acme}
spec:
  domain: acme.example
  limits:
%s
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: globex}
spec:
  domain: globex.example
`, system, acme)
	cfg, rep := config.LoadBytes(t.TempDir(), "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		t.Fatalf("config problems: %+v", rep.Problems)
	}
	return cfg
}

func TestEffectiveLimitsOverridePerKey(t *testing.T) {
	cfg := limitsConfig(t, `      maxConcurrentCalls: 10
      maxConcurrentPerAccount: 2
      outboundMinutesPerHour: 60`, `      maxConcurrentCalls: 3
      outboundMinutesPerHour: 0`)
	l := NewLimiter(cfg, nil)
	acme, globex := l.Limits("acme"), l.Limits("globex")
	if acme.MaxConcurrentCalls != 3 || acme.MaxConcurrentPerAccount != 2 || acme.OutboundMinutesPerHour != 0 {
		t.Fatalf("acme limits %+v: want 3 overridden, 2 inherited, 0 (spelled out) overriding 60", acme)
	}
	if globex.MaxConcurrentCalls != 10 || globex.OutboundMinutesPerHour != 60 {
		t.Fatalf("globex limits %+v, want the System's", globex)
	}
}

func TestConcurrentCallsPerTenantAndAccount(t *testing.T) {
	cfg := limitsConfig(t, `      maxConcurrentCalls: 3
      maxConcurrentPerAccount: 2`, `      maxConcurrentCalls: 2`)
	l := NewLimiter(cfg, nil)

	r1, err := l.Reserve(Claim{Tenant: "acme", Account: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme"}); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("third acme call: %v, want ErrConcurrentCalls (tenant override 2)", err)
	}
	// globex: the System's 3 per tenant, 2 per account.
	for i := range 2 {
		if _, err := l.Reserve(Claim{Tenant: "globex", Account: "bob"}); err != nil {
			t.Fatalf("globex call %d: %v", i+1, err)
		}
	}
	if _, err := l.Reserve(Claim{Tenant: "globex", Account: "bob"}); !errors.Is(err, ErrConcurrentPerAccount) {
		t.Fatalf("bob's third call: %v, want ErrConcurrentPerAccount", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "globex"}); err != nil {
		t.Fatalf("a trunk call (no account) within the tenant's limit: %v", err)
	}
	if got := l.Usage("globex").Active; got != 3 {
		t.Fatalf("globex active %d, want 3", got)
	}

	r1()
	r1() // a second release gives nothing back
	if got := l.Usage("acme").Active; got != 1 {
		t.Fatalf("acme active %d after one release, want 1", got)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice"}); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "carol"}); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("released twice? %v", err)
	}
}

func TestOutboundPerMinute(t *testing.T) {
	cfg := limitsConfig(t, `      maxOutboundPerMinute: 2`, `      maxOutboundPerMinute: 2`)
	clk := newClock()
	l := NewLimiter(cfg, clk.Now)
	for i := range 2 {
		rel, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true})
		if err != nil {
			t.Fatalf("outbound %d: %v", i+1, err)
		}
		rel()
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); !errors.Is(err, ErrOutboundPerMinute) {
		t.Fatalf("third outbound within a minute: %v, want ErrOutboundPerMinute", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice"}); err != nil {
		t.Fatalf("an internal call is not an outbound setup: %v", err)
	}
	clk.Advance(29 * time.Second)
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); !errors.Is(err, ErrOutboundPerMinute) {
		t.Fatalf("29s later: %v, want still refused (one setup per 30s)", err)
	}
	clk.Advance(time.Second)
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); err != nil {
		t.Fatalf("30s later: %v", err)
	}
}

// TestOutboundMinutesPerClockHour: the hour budget is the clock hour's;
// minutes used before 13:00 do not count after it.
func TestOutboundMinutesPerClockHour(t *testing.T) {
	cfg := limitsConfig(t, `      outboundMinutesPerHour: 10`, `      outboundMinutesPerHour: 10`)
	clk := newClock() // 12:00 UTC; the tenants have no time zone, the host's is UTC in tests below
	l := NewLimiter(cfg, clk.Now)
	l.loc = func(string) *time.Location { return time.UTC }
	clk.Advance(40 * time.Minute)
	l.AddOutbound("acme", 10*time.Minute) // 12:30-12:40
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); !errors.Is(err, ErrMinutesPerHour) {
		t.Fatalf("after 10 outbound minutes: %v, want ErrMinutesPerHour", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice"}); err != nil {
		t.Fatalf("internal calls are not limited by outbound minutes: %v", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "globex", Account: "bob", Outbound: true}); err != nil {
		t.Fatalf("another tenant's minutes are its own: %v", err)
	}
	clk.Advance(19*time.Minute + 59*time.Second)
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); !errors.Is(err, ErrMinutesPerHour) {
		t.Fatalf("12:59:59: %v, want still refused", err)
	}
	clk.Advance(time.Second)
	if got := l.Usage("acme").OutboundHourMins; got != 0 {
		t.Fatalf("13:00 hour usage %.1f minutes, want 0", got)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Account: "alice", Outbound: true}); err != nil {
		t.Fatalf("the next clock hour: %v", err)
	}
}

func TestOutboundMinutesPerMonth(t *testing.T) {
	cfg := limitsConfig(t, `      outboundMinutesPerMonth: 100`, `      outboundMinutesPerMonth: 100`)
	clk := newClock() // 21 November
	l := NewLimiter(cfg, clk.Now)
	l.AddOutbound("acme", 99*time.Minute)
	if _, err := l.Reserve(Claim{Tenant: "acme", Outbound: true}); err != nil {
		t.Fatalf("at 99 of 100 minutes: %v", err)
	}
	l.AddOutbound("acme", time.Minute)
	clk.Advance(2 * time.Hour)
	if _, err := l.Reserve(Claim{Tenant: "acme", Outbound: true}); !errors.Is(err, ErrMinutesPerMonth) {
		t.Fatalf("at 100 minutes: %v, want ErrMinutesPerMonth", err)
	}
	clk.Advance(10 * 24 * time.Hour) // December
	if _, err := l.Reserve(Claim{Tenant: "acme", Outbound: true}); err != nil {
		t.Fatalf("next month: %v", err)
	}
	if got := l.Usage("acme").OutboundMonthMins; got != 0 {
		t.Fatalf("December usage %.1f, want 0", got)
	}
}

func TestReserveCallReleasedWhenCallEnds(t *testing.T) {
	cfg := limitsConfig(t, `      maxConcurrentCalls: 1
      outboundMinutesPerHour: 60`, `      maxConcurrentCalls: 1`)
	clk := newClock()
	l := NewLimiter(cfg, clk.Now)
	id := b2bua.NewCallID(clk.Now())
	if err := l.ReserveCall(id, Claim{Tenant: "acme", Account: "alice", Outbound: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.ReserveCall(b2bua.NewCallID(clk.Now()), Claim{Tenant: "acme", Account: "bob"}); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("second call: %v, want ErrConcurrentCalls", err)
	}
	start := clk.Now()
	l.CallEvent(b2bua.Event{Kind: b2bua.EventAnswered, Call: b2bua.CallInfo{ID: id, Answer: start}})
	if got := l.Usage("acme").Active; got != 1 {
		t.Fatalf("active %d after a non-final event, want 1", got)
	}
	clk.Advance(90 * time.Second)
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: id, Answer: start, End: clk.Now()}})
	u := l.Usage("acme")
	if u.Active != 0 || u.OutboundHourMins != 1.5 {
		t.Fatalf("usage %+v after the call ended, want 0 active and 1.5 outbound minutes", u)
	}
	// An unanswered call bills nothing; an unknown call is ignored.
	id2 := b2bua.NewCallID(clk.Now())
	if err := l.ReserveCall(id2, Claim{Tenant: "acme", Account: "alice", Outbound: true}); err != nil {
		t.Fatal(err)
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: "unknown"}})
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: id2, End: clk.Now()}})
	if u := l.Usage("acme"); u.Active != 0 || u.OutboundHourMins != 1.5 {
		t.Fatalf("usage %+v, want the unanswered call released without minutes", u)
	}
}
