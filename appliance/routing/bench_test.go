package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pbx/appliance/config"
)

// largeConfig has 1,000 tenants with 10 DIDs and 4 outbound routes each
// (10,000 DIDs), 1,000 global routes (5,000 routes in all), a few overrides
// and a default trunk.
func largeConfig() *config.Config {
	c := &config.Config{}
	c.System.AllowInterTenant = true
	c.System.DefaultTrunk = "t0"
	c.System.Security.Limits.BlockedPrefixes = []string{"1900", "00882", "+882"}
	for i := range 10 {
		c.Trunks = append(c.Trunks, &config.Trunk{Meta: meta(config.KindTrunk, fmt.Sprintf("t%d", i), ""), Host: fmt.Sprintf("127.0.1.%d", i)})
	}
	for i := range 1000 {
		name := fmt.Sprintf("t%04d", i)
		c.Tenants = append(c.Tenants, &config.Tenant{Meta: meta(config.KindTenant, name, ""), Domain: name + ".test", AllowInterTenant: true,
			RingGroups: []config.RingGroup{{Name: "all", Extensions: []string{"100", "101"}}}})
		for e := range 5 {
			c.Accounts = append(c.Accounts, &config.Account{Meta: meta(config.KindAccount, fmt.Sprintf("u%d", e), name), Extension: fmt.Sprintf("10%d", e)})
		}
		for d := range 10 {
			c.InboundRoutes = append(c.InboundRoutes, &config.InboundRoute{Meta: meta(config.KindInboundRoute, fmt.Sprintf("r%d", d), name),
				DID: fmt.Sprintf("+1555%04d%d", i, d), Destination: config.Destination{Type: config.DestExtension, Target: "100"}})
		}
		for r := range 4 {
			c.OutboundRoutes = append(c.OutboundRoutes, &config.OutboundRoute{Meta: meta(config.KindOutboundRoute, fmt.Sprintf("o%d", r), name),
				Priority: r, Pattern: fmt.Sprintf(`^%d%d\d+$`, i%10, r), Strip: 1, Prepend: "+", Trunk: fmt.Sprintf("t%d", r)})
		}
	}
	for g := range 1000 {
		c.OutboundRoutes = append(c.OutboundRoutes, &config.OutboundRoute{Meta: meta(config.KindOutboundRoute, fmt.Sprintf("g%04d", g), ""),
			Priority: g, Pattern: fmt.Sprintf(`^\+%d\d{6,}$`, 100+g), Trunk: fmt.Sprintf("t%d", g%10)})
	}
	c.InboundOverrides = []*config.InboundOverride{
		{Meta: meta(config.KindInboundOverride, "o1", ""), DID: "+15550000000", Tenant: "t0001", Destination: dest("extension", "100")},
	}
	return c
}

// BenchmarkDecision times one routing decision over a mix of inbound DIDs,
// calls between extensions and outbound numbers (tenant routes, global
// routes, the default trunk, blocked prefixes) with 1,000 tenants, 10,000
// DIDs and 5,000 outbound routes. It reports the 50th and 99th percentile.
func BenchmarkDecision(b *testing.B) {
	tb := New(largeConfig())
	rng := rand.New(rand.NewPCG(1, 2))
	type call func() Result
	var calls []call
	for range 4096 {
		ten := fmt.Sprintf("t%04d", rng.IntN(1000))
		switch rng.IntN(6) {
		case 0:
			did := fmt.Sprintf("+1555%04d%d", rng.IntN(1000), rng.IntN(10))
			calls = append(calls, func() Result { return tb.Inbound(InboundCall{Trunk: "t1", Numbers: []string{did}}) })
		case 1:
			calls = append(calls, func() Result { return tb.FromAccount(ten, "u0", "101", ten+".test") })
		case 2:
			n := fmt.Sprintf("%d%d%07d", rng.IntN(10), rng.IntN(4), rng.IntN(10000000))
			calls = append(calls, func() Result { return tb.FromAccount(ten, "u0", n, ten+".test") })
		case 3:
			n := fmt.Sprintf("+%d%07d", 100+rng.IntN(1000), rng.IntN(10000000))
			calls = append(calls, func() Result { return tb.FromAccount(ten, "u0", n, ten+".test") })
		case 4:
			n := fmt.Sprintf("%d", 5000000+rng.IntN(1000000))
			calls = append(calls, func() Result { return tb.FromAccount(ten, "u0", "*"+n, "") })
		case 5:
			calls = append(calls, func() Result { return tb.FromAccount(ten, "u0", "1900555", "") })
		}
	}
	durs := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r := calls[i%len(calls)]()
		durs = append(durs, time.Since(start))
		if r.Kind == "" {
			b.Fatal("no decision")
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkBuild times compiling the large configuration.
func BenchmarkBuild(b *testing.B) {
	c := largeConfig()
	b.ReportAllocs()
	for b.Loop() {
		_ = New(c)
	}
}
