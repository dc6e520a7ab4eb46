package appliance

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/guard"
	"pbx/web/api"
)

// TestGuardSourceServesBansCountersAndLift: the API adapter lists the
// guard's bans, maps its counters field by field, and answers ErrNotFound
// for lifting an address that is not banned.
func TestGuardSourceServesBansCountersAndLift(t *testing.T) {
	g, err := guard.New(guard.Options{Security: config.Security{
		Enabled: true, PacketRate: 1, PacketBurst: 1, AuthFailures: 2,
		AuthWindow: config.Duration(time.Minute), BanDuration: config.Duration(time.Minute), BanMax: config.Duration(time.Hour),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := guardSource{g}
	ctx := context.Background()
	attacker := netip.MustParseAddrPort("203.0.113.9:5060")
	for range 3 {
		g.Admit(attacker, "udp", []byte("x"))
	}
	g.RecordAuthFailure(attacker)
	g.RecordAuthFailure(attacker)
	g.Admit(attacker, "udp", []byte("x"))

	bans, err := src.Bans(ctx)
	if err != nil || len(bans) != 1 || bans[0].IP != "203.0.113.9" || bans[0].Offences != 1 ||
		bans[0].Until.Sub(bans[0].Since) != time.Minute || bans[0].Since.Location() != time.UTC {
		t.Fatalf("bans %+v, %v", bans, err)
	}
	c, err := src.Counters(ctx)
	want := api.Counters{Packets: 4, Dropped: 3, RateLimited: 2, Banned: 1, AuthFailure: 2, BansIssued: 1, BansActive: 1, Tracked: 1}
	if err != nil || c != want {
		t.Fatalf("counters %+v, want %+v (%v)", c, want, err)
	}
	if err := src.Lift(ctx, netip.MustParseAddr("203.0.113.10")); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("lift of an address not banned: %v, want api.ErrNotFound", err)
	}
	if err := src.Lift(ctx, attacker.Addr()); err != nil {
		t.Fatal(err)
	}
	if bans, _ := src.Bans(ctx); bans == nil || len(bans) != 0 {
		t.Fatalf("bans after lift %#v, want an empty list", bans)
	}
}

// TestGuardSourceServesEvictionAndAccountCounters: evictions from the full
// tracker, fail-open events and the account lock's counts reach the API.
func TestGuardSourceServesEvictionAndAccountCounters(t *testing.T) {
	g, err := guard.New(guard.Options{Security: config.Security{
		Enabled: true, PacketRate: 1, PacketBurst: 1, AuthFailures: 5, MaxTracked: 1,
		AuthWindow: config.Duration(time.Minute), BanDuration: config.Duration(time.Minute), BanMax: config.Duration(time.Hour),
		AccountFailures: 10, AccountWindow: config.Duration(time.Minute), AccountLock: config.Duration(time.Minute),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		g.Admit(netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 5060), "udp", []byte("x"))
	}
	for i := range 10 {
		g.OnAuthFailure(netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 5060), "acme.example", "alice")
	}
	if g.OnAuthSuccess(netip.MustParseAddrPort("198.51.100.1:5060"), "acme.example", "alice") {
		t.Fatal("locked account accepted valid credentials from a new source")
	}
	c, err := guardSource{g}.Counters(context.Background())
	// Three sources evict one another; the first failing source evicts the
	// last of them and the other nine, with the tracker full of a failing
	// source, fail open.
	want := api.Counters{Packets: 3, AuthFailure: 10, Evicted: 3, Untracked: 9, Tracked: 1,
		AccountFailures: 10, AccountLocks: 1, AccountRefused: 1, AccountsLocked: 1}
	if err != nil || c != want {
		t.Fatalf("counters %+v, want %+v (%v)", c, want, err)
	}
}
