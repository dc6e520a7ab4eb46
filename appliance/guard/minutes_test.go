package guard

import (
	"errors"
	"sync"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/db"
	"pbx/sipcore/b2bua"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	return loc
}

// TestMinutesCountInTenantHourAndMonth: time is counted in the clock hour
// and month of the tenant's zone it was used in; a call over a boundary
// splits.
func TestMinutesCountInTenantHourAndMonth(t *testing.T) {
	kolkata := mustLoad(t, "Asia/Kolkata") // +05:30: its hours start at :30 UTC
	var m minutes
	from := time.Date(2026, 11, 21, 12, 20, 0, 0, time.UTC) // 17:50 local
	m.add(from, from.Add(20*time.Minute), kolkata)
	hour, month := m.used(from.Add(20*time.Minute), kolkata)
	if hour != 10*time.Minute || month != 20*time.Minute {
		t.Fatalf("at 18:10 local: hour %s month %s, want 10m (18:00-18:10) and 20m", hour, month)
	}
	if hour, _ := m.used(from.Add(9*time.Minute), kolkata); hour != 0 {
		t.Fatalf("asked at 17:59 local after 18:00 was counted: %s, want 0 (the earlier hour was replaced)", hour)
	}

	ny := mustLoad(t, "America/New_York")
	var n minutes
	from = time.Date(2026, 12, 1, 4, 50, 0, 0, time.UTC) // 30 Nov 23:50 EST; 1 Dec in UTC
	n.add(from, from.Add(20*time.Minute), ny)
	hour, month = n.used(from.Add(20*time.Minute), ny)
	if hour != 10*time.Minute || month != 10*time.Minute {
		t.Fatalf("at 00:10 EST on 1 Dec: hour %s month %s, want 10m each (November's 10m stay in November)", hour, month)
	}
	if n.MonthStart.In(ny).Day() != 1 || n.MonthStart.In(ny).Hour() != 0 {
		t.Fatalf("month starts %s, want local midnight on the 1st", n.MonthStart.In(ny))
	}
}

type cutLog struct {
	mu   sync.Mutex
	cuts map[b2bua.CallID]error
}

func (c *cutLog) cut(id b2bua.CallID, err error) {
	c.mu.Lock()
	c.cuts[id] = err
	c.mu.Unlock()
}

func (c *cutLog) get() map[b2bua.CallID]error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[b2bua.CallID]error{}
	for k, v := range c.cuts {
		out[k] = v
	}
	return out
}

// TestMeterCutsParallelCallsWhenBudgetSpent: answered outbound calls are
// metered while they run, together: two calls admitted with 2 minutes left
// in the hour are both cut after one minute, once; the tenant's internal
// call and its unanswered outbound call are not.
func TestMeterCutsParallelCallsWhenBudgetSpent(t *testing.T) {
	cfg := limitsConfig(t, `      outboundMinutesPerHour: 2`, `      outboundMinutesPerHour: 2`)
	clk := newClock()
	l := NewLimiter(cfg, clk.Now)
	cuts := &cutLog{cuts: map[b2bua.CallID]error{}}
	l.OnExhausted(cuts.cut)
	var ids []b2bua.CallID
	for i, c := range []Claim{
		{Tenant: "acme", Account: "alice", Outbound: true},
		{Tenant: "acme", Account: "bob", Outbound: true},
		{Tenant: "acme", Account: "carol"},                  // internal
		{Tenant: "acme", Account: "dave", Outbound: true},   // never answered
		{Tenant: "globex", Account: "erin", Outbound: true}, // another tenant
	} {
		id := b2bua.CallID(string(rune('a' + i)))
		if err := l.ReserveCall(id, c); err != nil {
			t.Fatalf("call %s: %v", id, err)
		}
		if i != 3 {
			l.CallEvent(b2bua.Event{Kind: b2bua.EventAnswered, Call: b2bua.CallInfo{ID: id, Answer: clk.Now()}})
		}
		ids = append(ids, id)
	}
	clk.Advance(30 * time.Second)
	l.Meter()
	if got := l.Usage("acme").OutboundHourMins; got != 1 {
		t.Fatalf("after 30 s of two calls: %.2f minutes, want 1", got)
	}
	if n := len(cuts.get()); n != 0 {
		t.Fatalf("%d calls cut with a minute left", n)
	}
	clk.Advance(30 * time.Second)
	l.Meter()
	l.Meter() // a second pass cuts nobody twice
	got := cuts.get()
	if len(got) != 2 || !errors.Is(got[ids[0]], ErrMinutesPerHour) || !errors.Is(got[ids[1]], ErrMinutesPerHour) {
		t.Fatalf("cuts %v, want the two answered outbound calls of acme with ErrMinutesPerHour", got)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Outbound: true}); !errors.Is(err, ErrMinutesPerHour) {
		t.Fatalf("a new outbound call: %v, want ErrMinutesPerHour", err)
	}
	// The cut calls end a little later; their last second still counts.
	clk.Advance(time.Second)
	for _, id := range ids[:2] {
		l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: id, End: clk.Now()}})
	}
	if u := l.Usage("acme"); u.OutboundHourMins*60 != 122 || u.Active != 2 {
		t.Fatalf("usage %+v, want 2 minutes 2 seconds and 2 calls still up", u)
	}
	if u := l.Usage("globex"); u.OutboundHourMins*60 != 61 {
		t.Fatalf("globex usage %+v, want its own call's 61 s", u)
	}
}

// TestMinutesSurviveRestart: counters saved in bbolt are there for the
// next Limiter on the same file, and still refuse calls.
func TestMinutesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := limitsConfig(t, `      outboundMinutesPerMonth: 2`, `      outboundMinutesPerMonth: 2`)
	clk := newClock()
	open := func() (*db.DB, *Limiter) {
		d, err := db.Open(dir, db.Options{NoSync: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		l := NewLimiter(cfg, clk.Now)
		if err := l.Persist(d.Minutes()); err != nil {
			t.Fatal(err)
		}
		return d, l
	}
	d, l := open()
	if err := l.ReserveCall("c1", Claim{Tenant: "acme", Outbound: true}); err != nil {
		t.Fatal(err)
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventAnswered, Call: b2bua.CallInfo{ID: "c1", Answer: clk.Now()}})
	clk.Advance(90 * time.Second)
	l.Meter() // the call is still up: its time so far is saved
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d, l = open()
	defer d.Close()
	if got := l.Usage("acme").OutboundMonthMins; got != 1.5 {
		t.Fatalf("after restart: %.2f minutes, want 1.5", got)
	}
	l.AddOutbound("acme", 30*time.Second)
	if _, err := l.Reserve(Claim{Tenant: "acme", Outbound: true}); !errors.Is(err, ErrMinutesPerMonth) {
		t.Fatalf("at 2 of 2 minutes: %v, want ErrMinutesPerMonth", err)
	}
}

// TestInterTenantClaim: an inter-tenant call takes a place under both
// tenants' maxConcurrentCalls, and its per-account limit is the caller's
// own tenant's, keyed on that tenant.
func TestInterTenantClaim(t *testing.T) {
	cfg := limitsConfig(t, `      maxConcurrentPerAccount: 1
      maxConcurrentCalls: 5`, `      maxConcurrentPerAccount: 0
      maxConcurrentCalls: 1`)
	l := NewLimiter(cfg, nil)
	rel, err := l.Reserve(Claim{Tenant: "acme", CallerTenant: "globex", Account: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if a, g := l.Usage("acme").Active, l.Usage("globex").Active; a != 1 || g != 1 {
		t.Fatalf("active acme %d globex %d, want 1 each", a, g)
	}
	if _, err := l.Reserve(Claim{Tenant: "globex", Account: "bob"}); !errors.Is(err, ErrConcurrentPerAccount) {
		t.Fatalf("bob's second call: %v, want globex's 1 per account (not acme's none)", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "globex", CallerTenant: "acme", Account: "bob"}); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("an acme caller while acme has its 1 call: %v, want ErrConcurrentCalls", err)
	}
	rel()
	if a, g := l.Usage("acme").Active, l.Usage("globex").Active; a != 0 || g != 0 {
		t.Fatalf("after release: active acme %d globex %d", a, g)
	}
	if _, err := l.Reserve(Claim{Tenant: "globex", Account: "bob"}); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// TestLimiterCountsInTenantTimeZone: the Limiter takes each tenant's zone
// from its configuration.
func TestLimiterCountsInTenantTimeZone(t *testing.T) {
	mustLoad(t, "Asia/Kolkata")
	doc := `configVersion: pbx/v1
kind: System
spec:
  timezone: UTC
  security:
    limits: {outboundMinutesPerHour: 15}
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: acme}
spec: {domain: acme.example, timezone: Asia/Kolkata}
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: globex}
spec: {domain: globex.example}
`
	cfg, rep := config.LoadBytes(t.TempDir(), "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		t.Fatalf("config problems: %+v", rep.Problems)
	}
	clk := newClock()
	clk.Advance(40 * time.Minute) // 12:40 UTC, 18:10 in Kolkata
	l := NewLimiter(cfg, clk.Now)
	for _, tn := range []string{"acme", "globex"} {
		l.AddOutbound(tn, 20*time.Minute) // from 12:20 UTC
	}
	if a, g := l.Usage("acme").OutboundHourMins, l.Usage("globex").OutboundHourMins; a != 10 || g != 20 {
		t.Fatalf("hour usage acme %.1f globex %.1f, want 10 (Kolkata's hour began at 12:30 UTC) and 20", a, g)
	}
	if _, err := l.Reserve(Claim{Tenant: "globex", Outbound: true}); !errors.Is(err, ErrMinutesPerHour) {
		t.Fatalf("globex at 20 of 15 minutes: %v", err)
	}
	if _, err := l.Reserve(Claim{Tenant: "acme", Outbound: true}); err != nil {
		t.Fatalf("acme at 10 of 15 minutes this hour: %v", err)
	}
}
