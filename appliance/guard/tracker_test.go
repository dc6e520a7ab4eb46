package guard

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// keepAlive is the 4-byte CRLFCRLF a phone sends to keep a NAT binding.
var keepAlive = []byte("\r\n\r\n")

// addr4 is the i-th address of 10.0.0.0/8, as a flood of spoofed sources.
func addr4(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 5060)
}

// lockedBuffer is a log sink safe for the guard's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLoggedGuard(t *testing.T, opts Options) (*Guard, *fakeClock, *lockedBuffer) {
	t.Helper()
	c := newClock()
	opts.Now = c.Now
	buf := &lockedBuffer{}
	g, err := New(opts, slog.New(slog.NewTextHandler(buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return g, c, buf
}

// sameShard returns n addresses of 10.0.0.0/8 that share one shard.
func sameShard(g *Guard, n int) []netip.AddrPort {
	var out []netip.AddrPort
	want := g.shardOf(addr4(0).Addr())
	for i := 0; len(out) < n; i++ {
		if g.shardOf(addr4(i).Addr()) == want {
			out = append(out, addr4(i))
		}
	}
	return out
}

// TestFullTrackerEvictsLeastRecentlySeen: in a full tracker a new source
// takes the place of the least recently seen one of its shard, and is
// throttled like any tracked source.
func TestFullTrackerEvictsLeastRecentlySeen(t *testing.T) {
	sec := security()
	sec.PacketRate, sec.PacketBurst, sec.MaxTracked = 1, 1, 3
	g, _ := newGuard(t, sec)
	s := sameShard(g, 5)
	for _, src := range s[:3] {
		g.Admit(src, "udp", keepAlive)
	}
	g.Admit(s[0], "udp", keepAlive) // s[1] is now the least recently seen
	if n := admitted(g, s[3], 3); n != 1 {
		t.Fatalf("new source in a full tracker: %d of 3 admitted, want the burst of 1 (tracked)", n)
	}
	if n := admitted(g, s[0], 1); n != 0 {
		t.Fatal("s[0] was forgotten: its empty bucket refilled")
	}
	if n := admitted(g, s[2], 1); n != 0 {
		t.Fatal("s[2] was forgotten: its empty bucket refilled")
	}
	if n := admitted(g, s[1], 1); n != 1 {
		t.Fatal("s[1], the least recently seen, still tracked")
	}
	c := g.Counters()
	if c.Tracked != 3 || c.Evicted != 2 || c.Untracked != 0 {
		t.Fatalf("counters %+v, want 3 tracked, 2 evicted (s[1], then s[3] for s[1]), none untracked", c)
	}
}

// TestKeepAliveFloodCannotBlindTheGuard: a tracker filled by a flood of
// keep-alives from twice maxTracked sources, still flooding, does not stop
// a brute force from a new source being tracked and banned.
func TestKeepAliveFloodCannotBlindTheGuard(t *testing.T) {
	sec := security()
	sec.MaxTracked, sec.AuthFailures = 1000, 5
	g, clk, log := newLoggedGuard(t, Options{Security: sec})
	for round := range 3 {
		for i := range 2 * sec.MaxTracked {
			if !g.Admit(addr4(i), "udp", keepAlive) {
				t.Fatalf("round %d: keep-alive %d dropped", round, i)
			}
		}
		clk.Advance(time.Millisecond)
	}
	attacker := ap("203.0.113.66:5060")
	var banned bool
	for i := range 5 {
		if !g.Admit(attacker, "udp", sipPacket) {
			t.Fatalf("guess %d dropped before the ban", i)
		}
		_, banned = g.RecordAuthFailure(attacker)
		for j := range 200 { // the flood goes on between guesses
			g.Admit(addr4(2*sec.MaxTracked+i*200+j), "udp", keepAlive)
		}
	}
	if !banned {
		t.Fatal("brute force from a new source not banned while the tracker was full of keep-alive sources")
	}
	if g.Admit(attacker, "udp", sipPacket) {
		t.Fatal("banned attacker admitted")
	}
	c := g.Counters()
	if c.Tracked != sec.MaxTracked || c.Untracked != 0 || c.Evicted < uint64(5*sec.MaxTracked) || c.BansActive != 1 {
		t.Fatalf("counters %+v: want a full tracker, no fail open, every new source evicting an idle one, one ban", c)
	}
	g.flushLogs()
	if n := strings.Count(log.String(), "evicted="); n != 1 || strings.Contains(log.String(), "without tracking") {
		t.Fatalf("want one eviction line and no fail open:\n%s", log)
	}
}

// TestEvictionSparesFailuresAndBans: however many new sources arrive,
// neither a source with a failure inside the window nor a banned one is
// forgotten.
func TestEvictionSparesFailuresAndBans(t *testing.T) {
	sec := security()
	sec.MaxTracked, sec.AuthFailures = 64, 2
	g, clk := newGuard(t, sec)
	failing, bannedSrc := ap("203.0.113.70:5060"), ap("203.0.113.71:5060")
	g.RecordAuthFailure(failing)
	if _, ok := fail(g, bannedSrc, 2); !ok {
		t.Fatal("not banned")
	}
	for i := range 100 * sec.MaxTracked {
		g.Admit(addr4(i), "udp", keepAlive)
		if i%1000 == 0 {
			clk.Advance(time.Second)
		}
	}
	if g.Admit(bannedSrc, "udp", sipPacket) {
		t.Fatal("the banned source was forgotten: admitted")
	}
	if _, ok := g.RecordAuthFailure(failing); !ok {
		t.Fatal("the failing source was forgotten: its second failure did not ban")
	}
	if c := g.Counters(); c.Tracked != sec.MaxTracked || c.Untracked != 0 || c.BansActive != 2 {
		t.Fatalf("counters %+v", c)
	}
}

// TestFailOpenCountedAndLoggedOncePerMinute: a tracker full of sources
// with failures admits a new source untracked, counts every such event,
// and logs the first of each minute with the count.
func TestFailOpenCountedAndLoggedOncePerMinute(t *testing.T) {
	sec := security()
	sec.MaxTracked, sec.AuthFailures = 2, 5
	g, clk, log := newLoggedGuard(t, Options{Security: sec})
	g.RecordAuthFailure(ap("203.0.113.80:5060"))
	g.RecordAuthFailure(ap("203.0.113.81:5060"))
	newcomer := ap("203.0.113.82:5060")
	if n := admitted(g, newcomer, 500); n != 500 {
		t.Fatalf("%d of 500 admitted: want fail open", n)
	}
	if _, banned := fail(g, newcomer, 5); banned {
		t.Fatal("untracked source banned")
	}
	c := g.Counters()
	if c.Untracked != 505 || c.Evicted != 0 || c.Tracked != 2 {
		t.Fatalf("counters %+v, want 505 untracked, nothing evicted", c)
	}
	if n := strings.Count(log.String(), "admitting without tracking"); n != 1 {
		t.Fatalf("%d fail-open lines for 505 events within a minute, want 1:\n%s", n, log)
	}
	clk.Advance(time.Minute)
	g.flushLogs()
	if n := strings.Count(log.String(), "admitting without tracking"); n != 2 || !strings.Contains(log.String(), "untracked=504") {
		t.Fatalf("after a minute: want a second line counting the 504 others:\n%s", log)
	}
	g.flushLogs()
	if n := strings.Count(log.String(), "admitting without tracking"); n != 2 {
		t.Fatalf("a flush with nothing pending logged:\n%s", log)
	}
}

// BenchmarkTrackedSourceMemory measures the heap held per tracked source
// (source, map entry and list links) with 20,000 sources, the default
// maxTracked.
func BenchmarkTrackedSourceMemory(b *testing.B) {
	const n = DefaultMaxTracked
	sec := security()
	var perSource float64
	for b.Loop() {
		before := heapInUse()
		g, err := New(Options{Security: sec}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			g.Admit(addr4(i), "udp", keepAlive)
		}
		perSource = float64(heapInUse()-before) / n
		if g.Counters().Tracked != n {
			b.Fatal("not all tracked")
		}
	}
	b.ReportMetric(perSource, "bytes/source")
}

// TestConcurrentFloodKeepsTrackerBounded: readers of several sockets
// flooding new sources into a small tracker (most shards empty, so
// evictions cross shards) while a brute-forcer fails: the count stays
// exact, nothing fails open and the brute-forcer is banned.
func TestConcurrentFloodKeepsTrackerBounded(t *testing.T) {
	sec := security()
	sec.MaxTracked, sec.AuthFailures = 8, 5
	g, _ := newGuard(t, sec)
	attacker := ap("203.0.113.90:5060")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				g.Admit(addr4(w<<16|i), "udp", keepAlive)
			}
		})
	}
	wg.Go(func() { fail(g, attacker, 5) })
	wg.Wait()
	if g.Admit(attacker, "udp", sipPacket) {
		t.Fatal("brute-forcer admitted")
	}
	n := 0
	for i := range g.shard {
		sh := &g.shard[i]
		sh.mu.Lock()
		k := 0
		for s := sh.list.head; s != nil; s = s.next {
			k++
		}
		if k != len(sh.m) {
			t.Errorf("shard %d: list of %d, map of %d", i, k, len(sh.m))
		}
		n += len(sh.m)
		sh.mu.Unlock()
	}
	c := g.Counters()
	if n != c.Tracked || c.Tracked > sec.MaxTracked || c.Untracked != 0 || c.BansActive != 1 {
		t.Fatalf("counters %+v with %d tracked in the shards", c, n)
	}
}
