package appliance

import (
	"net/netip"
	"runtime"
	"testing"

	"pbx/appliance/config"
	"pbx/appliance/guard"
)

// BenchmarkGuardSourceMemory measures what the security guard keeps per
// tracked source (the other half of the per-source state under a spoofed
// flood; sipcore's is BenchmarkUDPSourceMemory): the live heap after
// config.DefaultMaxTracked distinct sources each sent one packet, divided
// by the sources tracked.
func BenchmarkGuardSourceMemory(b *testing.B) {
	sec := config.Security{
		Enabled: true, PacketRate: config.DefaultPacketRate, PacketBurst: config.DefaultPacketBurst,
		AuthFailures: config.DefaultAuthFailures, AuthWindow: config.Duration(config.DefaultAuthWindow),
		BanDuration: config.Duration(config.DefaultBanDuration), BanMax: config.Duration(config.DefaultBanMax),
		MaxTracked: config.DefaultMaxTracked,
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	g, err := guard.New(guard.Options{Security: sec}, nil)
	if err != nil {
		b.Fatal(err)
	}
	packet := []byte("OPTIONS sip:pbx SIP/2.0\r\n\r\n")
	for i := range config.DefaultMaxTracked {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 5060)
		g.Admit(src, "udp", packet)
	}
	after := heap()
	tracked := g.Counters().Tracked
	if tracked == 0 {
		b.Fatal("nothing tracked")
	}
	per := float64(int64(after)-int64(before)) / float64(tracked)
	b.ReportMetric(per, "B/source")
	b.Logf("%d sources tracked: live heap %d -> %d bytes, %.0f B per source", tracked, before, after, per)
	runtime.KeepAlive(g)
}
