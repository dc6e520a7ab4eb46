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

	r1, err := l.Reserve("acme", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve("acme", "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve("acme", "", false); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("third acme call: %v, want ErrConcurrentCalls (tenant override 2)", err)
	}
	// globex: the System's 3 per tenant, 2 per account.
	for i := range 2 {
		if _, err := l.Reserve("globex", "bob", false); err != nil {
			t.Fatalf("globex call %d: %v", i+1, err)
		}
	}
	if _, err := l.Reserve("globex", "bob", false); !errors.Is(err, ErrConcurrentPerAccount) {
		t.Fatalf("bob's third call: %v, want ErrConcurrentPerAccount", err)
	}
	if _, err := l.Reserve("globex", "", false); err != nil {
		t.Fatalf("a trunk call (no account) within the tenant's limit: %v", err)
	}
	if got := l.Usage("globex").Active; got != 3 {
		t.Fatalf("globex active %d, want 3", got)
	}

	r1(0)
	r1(0) // a second release gives nothing back
	if got := l.Usage("acme").Active; got != 1 {
		t.Fatalf("acme active %d after one release, want 1", got)
	}
	if _, err := l.Reserve("acme", "alice", false); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if _, err := l.Reserve("acme", "carol", false); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("released twice? %v", err)
	}
}

func TestOutboundPerMinute(t *testing.T) {
	cfg := limitsConfig(t, `      maxOutboundPerMinute: 2`, `      maxOutboundPerMinute: 2`)
	clk := newClock()
	l := NewLimiter(cfg, clk.Now)
	for i := range 2 {
		rel, err := l.Reserve("acme", "alice", true)
		if err != nil {
			t.Fatalf("outbound %d: %v", i+1, err)
		}
		rel(0)
	}
	if _, err := l.Reserve("acme", "alice", true); !errors.Is(err, ErrOutboundPerMinute) {
		t.Fatalf("third outbound within a minute: %v, want ErrOutboundPerMinute", err)
	}
	if _, err := l.Reserve("acme", "alice", false); err != nil {
		t.Fatalf("an internal call is not an outbound setup: %v", err)
	}
	clk.Advance(29 * time.Second)
	if _, err := l.Reserve("acme", "alice", true); !errors.Is(err, ErrOutboundPerMinute) {
		t.Fatalf("29s later: %v, want still refused (one setup per 30s)", err)
	}
	clk.Advance(time.Second)
	if _, err := l.Reserve("acme", "alice", true); err != nil {
		t.Fatalf("30s later: %v", err)
	}
}

func TestOutboundMinutesPerHourRolling(t *testing.T) {
	cfg := limitsConfig(t, `      outboundMinutesPerHour: 10`, `      outboundMinutesPerHour: 10`)
	clk := newClock()
	l := NewLimiter(cfg, clk.Now)
	rel, err := l.Reserve("acme", "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Minute)
	rel(6 * time.Minute)
	clk.Advance(10 * time.Minute)
	l.AddOutbound("acme", 4*time.Minute) // 10 minutes within the hour
	if _, err := l.Reserve("acme", "alice", true); !errors.Is(err, ErrMinutesPerHour) {
		t.Fatalf("after 10 outbound minutes: %v, want ErrMinutesPerHour", err)
	}
	if _, err := l.Reserve("acme", "alice", false); err != nil {
		t.Fatalf("internal calls are not limited by outbound minutes: %v", err)
	}
	if _, err := l.Reserve("globex", "bob", true); err != nil {
		t.Fatalf("another tenant's minutes are its own: %v", err)
	}
	// 50 minutes after the first 6 were counted they leave the hour.
	clk.Advance(49 * time.Minute)
	if _, err := l.Reserve("acme", "alice", true); !errors.Is(err, ErrMinutesPerHour) {
		t.Fatalf("59 minutes later: %v, want still refused", err)
	}
	clk.Advance(time.Minute)
	if got := l.Usage("acme").OutboundHourMins; got != 4 {
		t.Fatalf("hour usage %.1f minutes, want 4", got)
	}
	if _, err := l.Reserve("acme", "alice", true); err != nil {
		t.Fatalf("an hour later: %v", err)
	}
}

func TestOutboundMinutesPerMonth(t *testing.T) {
	cfg := limitsConfig(t, `      outboundMinutesPerMonth: 100`, `      outboundMinutesPerMonth: 100`)
	clk := newClock() // 21 November
	l := NewLimiter(cfg, clk.Now)
	l.AddOutbound("acme", 99*time.Minute)
	if _, err := l.Reserve("acme", "", true); err != nil {
		t.Fatalf("at 99 of 100 minutes: %v", err)
	}
	l.AddOutbound("acme", time.Minute)
	clk.Advance(2 * time.Hour)
	if _, err := l.Reserve("acme", "", true); !errors.Is(err, ErrMinutesPerMonth) {
		t.Fatalf("at 100 minutes: %v, want ErrMinutesPerMonth", err)
	}
	clk.Advance(10 * 24 * time.Hour) // December
	if _, err := l.Reserve("acme", "", true); err != nil {
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
	if err := l.ReserveCall(id, "acme", "alice", true); err != nil {
		t.Fatal(err)
	}
	if err := l.ReserveCall(b2bua.NewCallID(clk.Now()), "acme", "bob", false); !errors.Is(err, ErrConcurrentCalls) {
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
	if err := l.ReserveCall(id2, "acme", "alice", true); err != nil {
		t.Fatal(err)
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: "unknown"}})
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: id2, End: clk.Now()}})
	if u := l.Usage("acme"); u.Active != 0 || u.OutboundHourMins != 1.5 {
		t.Fatalf("usage %+v, want the unanswered call released without minutes", u)
	}
}
