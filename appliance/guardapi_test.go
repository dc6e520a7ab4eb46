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
