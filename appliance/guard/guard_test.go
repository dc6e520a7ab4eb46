package guard

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"pbx/appliance/config"
)

// fakeClock is the injected clock of every time-based rule.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// security is the specification's defaults with the guard on and
// loopback not trusted.
func security() config.Security {
	return config.Security{
		Enabled:      true,
		PacketRate:   config.DefaultPacketRate,
		PacketBurst:  config.DefaultPacketBurst,
		AuthFailures: config.DefaultAuthFailures,
		AuthWindow:   config.Duration(config.DefaultAuthWindow),
		BanDuration:  config.Duration(config.DefaultBanDuration),
		BanMax:       config.Duration(config.DefaultBanMax),
		MaxTracked:   config.DefaultMaxTracked,

		AccountFailures: config.DefaultAccountFailures,
		AccountWindow:   config.Duration(config.DefaultAccountWindow),
		AccountLock:     config.Duration(config.DefaultAccountLock),
	}
}

func newGuard(t *testing.T, sec config.Security) (*Guard, *fakeClock) {
	t.Helper()
	c := newClock()
	g, err := New(Options{Security: sec, Now: c.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

var sipPacket = []byte("OPTIONS sip:pbx@192.0.2.1 SIP/2.0\r\nContent-Length: 0\r\n\r\n")

// admitted sends n packets from src and returns how many were admitted.
func admitted(g *Guard, src netip.AddrPort, n int) int {
	k := 0
	for range n {
		if g.Admit(src, "udp", sipPacket) {
			k++
		}
	}
	return k
}

func fail(g *Guard, src netip.AddrPort, n int) (Ban, bool) {
	var b Ban
	var ok bool
	for range n {
		b, ok = g.RecordAuthFailure(src)
	}
	return b, ok
}

func TestDenyWinsOverAllow(t *testing.T) {
	sec := security()
	sec.Deny = []string{"198.51.100.0/24", "2001:db8::7"}
	sec.Allow = []string{"198.51.100.9", "2001:db8::/32"}
	g, _ := newGuard(t, sec)
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"198.51.100.9:5060", false},   // allowed and denied: deny wins
		{"198.51.100.200:5060", false}, // denied
		{"[2001:db8::7]:5060", false},  // denied inside an allowed prefix
		{"[::ffff:198.51.100.9]:5060", false},
		{"[2001:db8::8]:5060", true},
		{"203.0.113.1:5060", true},
	} {
		if got := g.Admit(ap(tc.src), "udp", sipPacket); got != tc.want {
			t.Errorf("Admit(%s) = %v, want %v", tc.src, got, tc.want)
		}
	}
	c := g.Counters()
	if c.Denied != 4 || c.Dropped != 4 || c.Packets != 6 {
		t.Fatalf("counters %+v, want 4 denied and dropped of 6", c)
	}
}

func TestAllowAndTrustedLoopbackAreExempt(t *testing.T) {
	sec := security()
	sec.PacketRate, sec.PacketBurst, sec.AuthFailures = 1, 1, 2
	sec.Allow = []string{"192.0.2.0/24"}
	sec.TrustLoopback = true
	g, _ := newGuard(t, sec)
	for _, src := range []string{"192.0.2.44:5060", "127.0.0.2:5060", "[::1]:5060"} {
		if n := admitted(g, ap(src), 100); n != 100 {
			t.Errorf("%s: %d of 100 admitted, want all (exempt from throttling)", src, n)
		}
		if _, banned := fail(g, ap(src), 10); banned {
			t.Errorf("%s banned, want exempt from banning", src)
		}
		if !g.Admit(ap(src), "udp", sipPacket) {
			t.Errorf("%s dropped after failures", src)
		}
	}
	if n := admitted(g, ap("203.0.113.5:5060"), 100); n != 1 {
		t.Fatalf("other source: %d of 100 admitted, want the burst of 1", n)
	}
	if c := g.Counters(); c.Tracked != 1 || c.RateLimited != 99 || c.AuthFailures != 30 {
		t.Fatalf("counters %+v, want only the other source tracked, 99 rate limited, 30 failures counted", c)
	}

	sec.TrustLoopback = false
	g, _ = newGuard(t, sec)
	if n := admitted(g, ap("127.0.0.2:5060"), 100); n != 1 {
		t.Fatalf("untrusted loopback: %d of 100 admitted, want 1", n)
	}
}

func TestBanAfterFailuresInsideWindow(t *testing.T) {
	sec := security()
	sec.AuthFailures, sec.AuthWindow = 3, config.Duration(10*time.Minute)
	g, clk := newGuard(t, sec)
	src := ap("203.0.113.7:5060")
	other := ap("203.0.113.8:5060")
	start := clk.Now()
	for i := range 2 {
		if _, banned := g.RecordAuthFailure(src); banned {
			t.Fatalf("banned after %d failures", i+1)
		}
		clk.Advance(4 * time.Minute)
	}
	b, banned := g.RecordAuthFailure(src) // third, 8 minutes after the first
	if !banned {
		t.Fatal("3 failures within 10m did not ban")
	}
	want := Ban{IP: src.Addr(), Since: start.Add(8 * time.Minute), Until: start.Add(18 * time.Minute), Offences: 1, Reason: b.Reason}
	if b != want || b.Reason == "" {
		t.Fatalf("ban %+v, want %+v with a reason", b, want)
	}
	if g.Admit(src, "udp", sipPacket) || g.Admit(ap("203.0.113.7:40000"), "tcp", sipPacket) {
		t.Fatal("banned address admitted (any port, any transport)")
	}
	if !g.Admit(other, "udp", sipPacket) {
		t.Fatal("another address dropped")
	}
	bans := g.Bans()
	if len(bans) != 1 || bans[0] != b {
		t.Fatalf("Bans() = %+v, want [%+v]", bans, b)
	}
	if c := g.Counters(); c.Banned != 2 || c.BansActive != 1 || c.BansIssued != 1 || c.AuthFailures != 3 {
		t.Fatalf("counters %+v", c)
	}
}

func TestNoBanWhenFailuresSpreadBeyondWindow(t *testing.T) {
	sec := security()
	sec.AuthFailures, sec.AuthWindow = 3, config.Duration(10*time.Minute)
	g, clk := newGuard(t, sec)
	src := ap("203.0.113.7:5060")
	// Failures at 0, 6m and 12m: at 12m the first is out of the window.
	for i := range 3 {
		if _, banned := g.RecordAuthFailure(src); banned {
			t.Fatalf("failure %d banned, though never 3 within 10m", i+1)
		}
		clk.Advance(6 * time.Minute)
	}
	if len(g.Bans()) != 0 || !g.Admit(src, "udp", sipPacket) {
		t.Fatal("source banned")
	}
	// 6m, 12m and now 13m are within 10m of each other.
	clk.Advance(-5 * time.Minute)
	if _, banned := g.RecordAuthFailure(src); !banned {
		t.Fatal("3 failures within 10m did not ban")
	}
}

func TestBanDoublesPerOffenceUpToBanMax(t *testing.T) {
	sec := security()
	sec.AuthFailures = 2
	sec.BanDuration, sec.BanMax = config.Duration(10*time.Minute), config.Duration(35*time.Minute)
	g, clk := newGuard(t, sec)
	src := ap("203.0.113.9:5060")
	for i, want := range []time.Duration{10 * time.Minute, 20 * time.Minute, 35 * time.Minute, 35 * time.Minute} {
		b, banned := fail(g, src, 2)
		if !banned {
			t.Fatalf("offence %d: not banned", i+1)
		}
		if got := b.Until.Sub(b.Since); got != want || b.Offences != i+1 {
			t.Fatalf("offence %d: ban of %s (offences %d), want %s", i+1, got, b.Offences, want)
		}
		clk.Advance(want - time.Second)
		if g.Admit(src, "udp", sipPacket) {
			t.Fatalf("offence %d: admitted a second before the ban ends", i+1)
		}
		clk.Advance(time.Second)
		if !g.Admit(src, "udp", sipPacket) {
			t.Fatalf("offence %d: dropped when the ban ended", i+1)
		}
	}
	// Unbanned for banMax: offences are forgotten.
	clk.Advance(35 * time.Minute)
	b, _ := fail(g, src, 2)
	if got := b.Until.Sub(b.Since); got != 10*time.Minute || b.Offences != 1 {
		t.Fatalf("after banMax of good behaviour: ban of %s, offence %d; want 10m, 1", got, b.Offences)
	}
}

func TestBanExpiresAndDisappears(t *testing.T) {
	sec := security()
	sec.AuthFailures = 1
	g, clk := newGuard(t, sec)
	src := ap("203.0.113.10:5060")
	fail(g, src, 1)
	if len(g.Bans()) != 1 {
		t.Fatal("no ban")
	}
	clk.Advance(sec.BanDuration.D())
	if n := len(g.Bans()); n != 0 {
		t.Fatalf("%d bans listed after expiry", n)
	}
	if !g.Admit(src, "udp", sipPacket) {
		t.Fatal("dropped after the ban expired")
	}
	if c := g.Counters(); c.BansActive != 0 {
		t.Fatalf("bans_active %d after expiry", c.BansActive)
	}
	// The offence is remembered (the source stays tracked) until banMax
	// has passed since the ban ended; then the janitor forgets it.
	if n := g.sweepIdle(); n != 0 {
		t.Fatalf("sweep forgot %d sources while an offence is remembered", n)
	}
	clk.Advance(sec.BanMax.D())
	if n := g.sweepIdle(); n != 1 || g.Counters().Tracked != 0 {
		t.Fatalf("sweep forgot %d, tracked %d; want the source forgotten", n, g.Counters().Tracked)
	}
}

func TestLiftEndsBanAndForgetsOffences(t *testing.T) {
	sec := security()
	sec.AuthFailures = 2
	g, _ := newGuard(t, sec)
	src := ap("203.0.113.11:5060")
	fail(g, src, 2)
	fail(g, src, 1) // during the ban: not counted toward the next
	if err := g.Lift(netip.MustParseAddr("203.0.113.12")); !errors.Is(err, ErrNotBanned) {
		t.Fatalf("lift of an address never banned: %v", err)
	}
	if err := g.Lift(netip.MustParseAddr("::ffff:203.0.113.11")); err != nil {
		t.Fatalf("lift: %v", err)
	}
	if !g.Admit(src, "udp", sipPacket) || len(g.Bans()) != 0 {
		t.Fatal("still banned after lift")
	}
	if err := g.Lift(src.Addr()); !errors.Is(err, ErrNotBanned) {
		t.Fatalf("second lift: %v, want ErrNotBanned", err)
	}
	if _, banned := g.RecordAuthFailure(src); banned {
		t.Fatal("one failure after lift banned again: failures not forgotten")
	}
	b, banned := g.RecordAuthFailure(src)
	if !banned || b.Offences != 1 || b.Until.Sub(b.Since) != sec.BanDuration.D() {
		t.Fatalf("ban after lift %+v, want a first offence of banDuration", b)
	}
}

func TestPacketRateWithBurst(t *testing.T) {
	sec := security()
	sec.PacketRate, sec.PacketBurst = 10, 20
	g, clk := newGuard(t, sec)
	src := ap("203.0.113.20:5060")
	if n := admitted(g, src, 50); n != 20 {
		t.Fatalf("%d of 50 admitted at once, want the burst of 20", n)
	}
	clk.Advance(100 * time.Millisecond) // one token at 10/s
	if n := admitted(g, src, 5); n != 1 {
		t.Fatalf("%d admitted 100ms later, want 1", n)
	}
	clk.Advance(time.Hour)
	if n := admitted(g, src, 50); n != 20 {
		t.Fatalf("%d admitted after an idle hour, want the burst of 20 (not more)", n)
	}
	// Sustained: 10 per second over 5 seconds at 40/s offered.
	total := 0
	for range 200 {
		clk.Advance(25 * time.Millisecond)
		total += admitted(g, src, 1)
	}
	if total != 50 {
		t.Fatalf("%d admitted over 5s at 40/s offered, want 50 (10/s)", total)
	}
	if c := g.Counters(); c.RateLimited != 30+4+30+150 || len(g.Bans()) != 0 {
		t.Fatalf("counters %+v; rate limiting must count and never ban", c)
	}
}

func TestBurstRaisedToRate(t *testing.T) {
	sec := security()
	sec.PacketRate, sec.PacketBurst = 10, 2
	g, _ := newGuard(t, sec)
	if n := admitted(g, ap("203.0.113.21:5060"), 50); n != 10 {
		t.Fatalf("%d admitted, want the burst raised to the rate (10)", n)
	}
}

func TestMaxDatagramUDPOnly(t *testing.T) {
	sec := security()
	sec.MaxDatagram = 100
	sec.TrustLoopback = true
	g, _ := newGuard(t, sec)
	small, big := make([]byte, 100), make([]byte, 101)
	for _, tc := range []struct {
		src, tr string
		pkt     []byte
		want    bool
	}{
		{"203.0.113.30:5060", "udp", small, true},
		{"203.0.113.30:5060", "udp", big, false},
		{"203.0.113.30:5060", "tcp", big, true},
		{"127.0.0.1:5060", "udp", big, false}, // exempt from throttling, not from size
	} {
		if got := g.Admit(ap(tc.src), tc.tr, tc.pkt); got != tc.want {
			t.Errorf("%s %s %d bytes: %v, want %v", tc.src, tc.tr, len(tc.pkt), got, tc.want)
		}
	}
	if c := g.Counters(); c.Oversize != 2 || c.Dropped != 2 {
		t.Fatalf("counters %+v", c)
	}
	sec.MaxDatagram = 0
	g, _ = newGuard(t, sec)
	if !g.Admit(ap("203.0.113.30:5060"), "udp", make([]byte, 65000)) {
		t.Fatal("maxDatagram 0 dropped a large datagram")
	}
}

func TestDisabledOnlyCounts(t *testing.T) {
	sec := security()
	sec.Enabled = false
	sec.PacketRate, sec.PacketBurst, sec.AuthFailures, sec.MaxDatagram = 1, 1, 1, 10
	sec.Deny = []string{"203.0.113.0/24"}
	g, _ := newGuard(t, sec)
	src := ap("203.0.113.40:5060")
	if n := admitted(g, src, 100); n != 100 {
		t.Fatalf("%d of 100 admitted with the guard off", n)
	}
	if _, banned := fail(g, src, 5); banned {
		t.Fatal("banned with the guard off")
	}
	if !g.Admit(src, "udp", make([]byte, 1000)) {
		t.Fatal("maxDatagram applied with the guard off")
	}
	c := g.Counters()
	if c.Packets != 101 || c.Dropped != 0 || c.AuthFailures != 5 || c.Tracked != 0 || c.BansActive != 0 {
		t.Fatalf("counters %+v, want 101 packets and 5 failures counted, nothing else", c)
	}
	if bans := g.Bans(); bans == nil || len(bans) != 0 {
		t.Fatalf("Bans() = %#v, want an empty list", bans)
	}
}

func TestSweepForgetsOnlyIdleSources(t *testing.T) {
	sec := security()
	sec.PacketRate, sec.PacketBurst = 10, 20 // refills in 2s
	sec.AuthFailures, sec.AuthWindow = 5, config.Duration(time.Minute)
	g, clk := newGuard(t, sec)
	quiet, failing := ap("203.0.113.50:5060"), ap("203.0.113.51:5060")
	admitted(g, quiet, 20)
	admitted(g, failing, 1)
	g.RecordAuthFailure(failing)
	clk.Advance(time.Second)
	if n := g.sweepIdle(); n != 0 {
		t.Fatalf("forgot %d sources whose buckets are not full", n)
	}
	clk.Advance(time.Second)
	if n := g.sweepIdle(); n != 1 {
		t.Fatalf("forgot %d, want the quiet source only (the other failed within the window)", n)
	}
	clk.Advance(time.Minute)
	if n := g.sweepIdle(); n != 1 || g.Counters().Tracked != 0 {
		t.Fatalf("forgot %d, tracked %d", n, g.Counters().Tracked)
	}
}

func TestAdmitTrackedSourceDoesNotAllocate(t *testing.T) {
	sec := security()
	sec.PacketRate, sec.PacketBurst = 1e9, 1e9
	sec.Deny = []string{"198.51.100.0/24"}
	sec.Allow = []string{"192.0.2.0/24"}
	g, err := New(Options{Security: sec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := ap("203.0.113.60:5060")
	g.Admit(src, "udp", sipPacket)
	if n := testing.AllocsPerRun(1000, func() { g.Admit(src, "udp", sipPacket) }); n != 0 {
		t.Fatalf("Admit allocates %.1f times per packet for a tracked source", n)
	}
}

func TestPrefixSet(t *testing.T) {
	ps, err := newPrefixSet([]string{"10.0.0.0/8", "192.0.2.7", "::ffff:198.51.100.0/120", "2001:db8::/48", "fe80::1"})
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{
		"10.200.0.1": true, "11.0.0.1": false, "192.0.2.7": true, "192.0.2.8": false,
		"198.51.100.77": true, "198.51.101.1": false, "2001:db8:0:ffff::1": true, "2001:db8:1::1": false,
		"fe80::1": true, "fe80::2": false,
	} {
		if got := ps.contains(netip.MustParseAddr(s)); got != want {
			t.Errorf("contains(%s) = %v, want %v", s, got, want)
		}
	}
	if _, err := newPrefixSet([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("bad prefix accepted")
	}
	if _, err := New(Options{Security: config.Security{Deny: []string{"nope"}}}, nil); err == nil {
		t.Fatal("New accepted a malformed deny entry")
	}
}

// TestBanHooks: the hooks are told of a ban imposed after failures and of
// a ban lifted, with the address and offences.
func TestBanHooks(t *testing.T) {
	sec := security()
	sec.AuthFailures = 2
	var banned, lifted []Ban
	g, err := New(Options{Security: sec, Now: newClock().Now,
		OnBan: func(b Ban) { banned = append(banned, b) }, OnLift: func(b Ban) { lifted = append(lifted, b) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := ap("203.0.113.40:5060")
	g.OnAuthFailure(src, "acme.example", "alice")
	if len(banned) != 0 {
		t.Fatalf("banned after one failure: %+v", banned)
	}
	g.OnAuthFailure(src, "acme.example", "alice")
	if len(banned) != 1 || banned[0].IP != src.Addr() || banned[0].Offences != 1 {
		t.Fatalf("bans told %+v", banned)
	}
	if err := g.Lift(src.Addr()); err != nil {
		t.Fatal(err)
	}
	if len(lifted) != 1 || lifted[0].IP != src.Addr() {
		t.Fatalf("lifts told %+v", lifted)
	}
}
