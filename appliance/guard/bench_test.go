package guard

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
)

func benchGuard(b *testing.B, deny int) *Guard {
	b.Helper()
	sec := security()
	sec.PacketRate, sec.PacketBurst = 1e12, 1e12 // never throttle: measure the admitted path
	for i := range deny {
		sec.Deny = append(sec.Deny, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	sec.Allow = []string{"192.0.2.0/24"}
	g, err := New(Options{Security: sec}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkAdmit is the per-packet cost for a tracked source that is
// admitted: deny and allow lists, ban check and token bucket.
func BenchmarkAdmit(b *testing.B) {
	for _, deny := range []int{0, 1000} {
		b.Run(fmt.Sprintf("deny=%d", deny), func(b *testing.B) {
			g := benchGuard(b, deny)
			src := netip.MustParseAddrPort("203.0.113.60:5060")
			g.Admit(src, "udp", sipPacket)
			b.ReportAllocs()
			for b.Loop() {
				if !g.Admit(src, "udp", sipPacket) {
					b.Fatal("dropped")
				}
			}
		})
	}
}

// BenchmarkAdmitParallel spreads 1,000 tracked sources over all
// goroutines, as several listeners' read loops would.
func BenchmarkAdmitParallel(b *testing.B) {
	g := benchGuard(b, 0)
	srcs := make([]netip.AddrPort, 1000)
	for i := range srcs {
		srcs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, byte(i / 256), byte(i)}), 5060)
		g.Admit(srcs[i], "udp", sipPacket)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			g.Admit(srcs[i%len(srcs)], "udp", sipPacket)
			i++
		}
	})
}

// BenchmarkAdmitRateLimited is the cost of dropping a flooding source.
func BenchmarkAdmitRateLimited(b *testing.B) {
	sec := security()
	g, err := New(Options{Security: sec}, nil)
	if err != nil {
		b.Fatal(err)
	}
	src := netip.MustParseAddrPort("203.0.113.61:5060")
	for range 1000 {
		g.Admit(src, "udp", sipPacket)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.Admit(src, "udp", sipPacket)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkAdmitFullTracker is the cost of a flood of new sources into a
// full tracker of blameless sources: each packet evicts the least recently
// seen source of its shard and takes its place.
func BenchmarkAdmitFullTracker(b *testing.B) {
	sec := security()
	sec.MaxTracked = 1000
	g, err := New(Options{Security: sec}, nil)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		g.Admit(addr4(i), "udp", keepAlive)
		i++
	}
	if c := g.Counters(); c.Untracked != 0 || c.Tracked != sec.MaxTracked {
		b.Fatalf("counters %+v", c)
	}
}

// BenchmarkOnAuthSuccess is what the account lock adds to every
// successful REGISTER or INVITE: 2,000 phones re-authenticating from
// their own addresses.
func BenchmarkOnAuthSuccess(b *testing.B) {
	g, err := New(Options{Security: security()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	users := make([]string, 2000)
	for i := range users {
		users[i] = fmt.Sprint("user", i)
		g.OnAuthSuccess(addr4(i), "acme.example", users[i])
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		k := i % len(users)
		if !g.OnAuthSuccess(addr4(k), "acme.example", users[k]) {
			b.Fatal("refused")
		}
		i++
	}
}
