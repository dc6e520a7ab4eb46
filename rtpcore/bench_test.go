package rtpcore

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// relayWindow is how many packets are in flight at once in BenchmarkRelay:
// enough to keep the relay goroutine busy, far below the socket buffers.
const relayWindow = 32

// BenchmarkRelay pushes packets through a real bridged pair of sockets on
// loopback: a phone sends to one leg, the relay forwards from the other
// leg, a second phone reads. ns/op is wall time per relayed packet;
// cpu-ns/pkt is the whole process's CPU per packet (phones included, see
// BenchmarkLoopbackBaseline for their share); allocs/op counts the whole
// process, relay goroutine included.
func BenchmarkRelay(b *testing.B) {
	e := newEngine(b, Options{})
	s, err := e.NewSession(SessionOptions{ID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	la, _ := s.NewLeg("a")
	lb, _ := s.NewLeg("b")
	pa, pb := newPhone(b), newPhone(b)
	la.SetRemote(pa.addr())
	lb.SetRemote(pb.addr())
	s.Bridge(la, lb)
	benchPath(b, pa, pb, legTo(la))
	if st := la.Stats(); st.PacketsLost != 0 {
		b.Logf("lost %d", st.PacketsLost)
	}
}

// BenchmarkRelayWithTap is BenchmarkRelay with a trivial tap on each leg.
func BenchmarkRelayWithTap(b *testing.B) {
	e := newEngine(b, Options{})
	s, _ := e.NewSession(SessionOptions{ID: "bench"})
	la, _ := s.NewLeg("a")
	lb, _ := s.NewLeg("b")
	pa, pb := newPhone(b), newPhone(b)
	la.SetRemote(pa.addr())
	lb.SetRemote(pb.addr())
	s.Bridge(la, lb)
	var n atomic.Uint64
	tap := TapFunc(func(p *Packet) { n.Add(uint64(len(p.Payload()))) })
	la.AddTap(tap)
	lb.AddTap(tap)
	benchPath(b, pa, pb, legTo(la))
	if n.Load() == 0 {
		b.Fatal("tap not called")
	}
}

// BenchmarkLoopbackBaseline is the same traffic sent straight from phone
// to phone with no relay: subtract its cpu-ns/pkt from BenchmarkRelay's
// to get the relay's own CPU per packet.
func BenchmarkLoopbackBaseline(b *testing.B) {
	pa, pb := newPhone(b), newPhone(b)
	benchPath(b, pa, pb, pb.addr())
}

func benchPath(b *testing.B, from, to *phone, addr netip.AddrPort) {
	pkt := from.packet(PayloadPCMA, 160)
	h, _ := ParseHeader(pkt)
	seq := h.Sequence
	buf := make([]byte, 2048)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	cpu0 := cpuTime()
	b.ResetTimer()
	for done := 0; done < b.N; {
		w := min(relayWindow, b.N-done)
		for i := 0; i < w; i++ {
			binary.BigEndian.PutUint16(pkt[2:], seq)
			seq++
			if _, err := from.conn.WriteToUDPAddrPort(pkt, addr); err != nil {
				b.Fatal(err)
			}
		}
		to.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := 0; i < w; i++ {
			if _, _, err := to.conn.ReadFromUDPAddrPort(buf); err != nil {
				b.Fatalf("packet %d: %v", done+i, err)
			}
		}
		done += w
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/pkt")
}

// TestRelayHotPathAllocs proves the per-packet path allocates nothing,
// with and without a tap.
func TestRelayHotPathAllocs(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	pkt := pa.packet(PayloadPCMA, 160)
	src := pa.addr()
	// Latch first so that the measured calls do not store a new address.
	la.handle(pkt, src, time.Now())
	allocs := testing.AllocsPerRun(200, func() {
		binary.BigEndian.PutUint16(pkt[2:], binary.BigEndian.Uint16(pkt[2:])+1)
		la.handle(pkt, src, time.Now())
	})
	if allocs != 0 {
		t.Errorf("relay path: %v allocs per packet", allocs)
	}
	var bytesSeen int
	la.AddTap(TapFunc(func(p *Packet) { bytesSeen += len(p.Raw) }))
	lb.AddTap(TapFunc(func(p *Packet) { bytesSeen += len(p.Raw) }))
	allocs = testing.AllocsPerRun(200, func() {
		binary.BigEndian.PutUint16(pkt[2:], binary.BigEndian.Uint16(pkt[2:])+1)
		la.handle(pkt, src, time.Now())
	})
	if allocs != 0 || bytesSeen == 0 {
		t.Errorf("relay path with taps: %v allocs per packet (tapped %d bytes)", allocs, bytesSeen)
	}
	inj, _ := lb.Inject(PayloadPCMA)
	payload := make([]byte, 160)
	allocs = testing.AllocsPerRun(200, func() { inj.Write(payload, 160) })
	if allocs != 0 {
		t.Errorf("injection: %v allocs per packet", allocs)
	}
	inj.Close()
	// Drain what was sent so the phone's buffer does not matter.
	for got, _ := pb.recv(100 * time.Millisecond); got != nil; got, _ = pb.recv(100 * time.Millisecond) {
	}
}

// loadResult is what runLoad measures.
type loadResult struct {
	calls       int
	duration    time.Duration
	sent, recvd uint64
	jitterP99   time.Duration
	jitterMax   time.Duration
	heapPerCall float64 // bytes of heap and stacks per call (relay side)
	rssPerCall  float64 // resident bytes per call (relay side)
	cpuPerPkt   time.Duration
}

func (r loadResult) lossPct() float64 {
	if r.sent == 0 {
		return 0
	}
	return 100 * float64(r.sent-min(r.recvd, r.sent)) / float64(r.sent)
}

// jitterHist is a shared histogram of |D| values in 10 µs buckets.
type jitterHist struct {
	buckets [10000]atomic.Uint64 // up to 100 ms
	over    atomic.Uint64
	max     atomic.Int64
}

func (h *jitterHist) add(d time.Duration) {
	if d < 0 {
		d = -d
	}
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
	i := int(d / (10 * time.Microsecond))
	if i >= len(h.buckets) {
		h.over.Add(1)
		return
	}
	h.buckets[i].Add(1)
}

func (h *jitterHist) quantile(q float64) time.Duration {
	var total uint64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	total += h.over.Load()
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	var acc uint64
	for i := range h.buckets {
		acc += h.buckets[i].Load()
		if acc >= want {
			return time.Duration(i+1) * 10 * time.Microsecond
		}
	}
	return time.Duration(h.max.Load())
}

func rssBytes() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb * 1024
			}
		}
	}
	return 0
}

func heapAndStacks() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse + m.StackInuse)
}

// runLoad holds calls bridged sessions for dur, each phone sending a
// 20 ms G.711 packet (172 bytes) every 20 ms toward its leg, and measures
// loss and the delay variation the path adds: for consecutive packets i-1,
// i of one stream, |(R_i - R_(i-1)) - (S_i - S_(i-1))| with S the real
// send time and R the arrival time (RFC 3550's D, on wall clocks, so the
// sender's own pacing error is not counted). With direct set, the phones
// send to each other instead, to measure what the phones alone cost.
func runLoad(tb testing.TB, calls int, dur time.Duration, direct bool) loadResult {
	tb.Helper()
	lo, hi := 0, 0
	if calls > 2000 {
		lo, hi = 20000, 60000
	}
	e, err := New(Options{BindIP: loopback, PortMin: lo, PortMax: hi, Quarantine: -1}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()

	heap0, rss0 := heapAndStacks(), rssBytes()
	type call struct {
		s      *Session
		la, lb *Leg
	}
	cs := make([]call, calls)
	for i := range cs {
		s, err := e.NewSession(SessionOptions{ID: fmt.Sprint("load-", i)})
		if err != nil {
			tb.Fatal(err)
		}
		la, err := s.NewLeg("a")
		if err != nil {
			tb.Fatal(err)
		}
		lb, err := s.NewLeg("b")
		if err != nil {
			tb.Fatal(err)
		}
		cs[i] = call{s, la, lb}
	}
	heap1, rss1 := heapAndStacks(), rssBytes()

	type stream struct {
		ph  *phone
		to  netip.AddrPort
		seq uint16
	}
	var phones []*stream
	for _, c := range cs {
		pa, pb := newPhone(tb), newPhone(tb)
		if direct {
			// Baseline: the phones talk to each other, the relay idles.
			phones = append(phones, &stream{ph: pa, to: pb.addr()}, &stream{ph: pb, to: pa.addr()})
			continue
		}
		c.la.SetRemote(pa.addr())
		c.lb.SetRemote(pb.addr())
		if err := c.s.Bridge(c.la, c.lb); err != nil {
			tb.Fatal(err)
		}
		phones = append(phones, &stream{ph: pa, to: legTo(c.la)}, &stream{ph: pb, to: legTo(c.lb)})
	}

	epoch := time.Now()
	var hist jitterHist
	var sent, recvd atomic.Uint64
	var wg sync.WaitGroup
	// Receivers: one goroutine per phone.
	for _, st := range phones {
		wg.Add(1)
		go func(st *stream) {
			defer wg.Done()
			buf := make([]byte, 2048)
			var lastS, lastR int64
			have := false
			for {
				n, _, err := st.ph.conn.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				r := int64(time.Since(epoch))
				if n < HeaderLen+8 {
					continue
				}
				s := int64(binary.BigEndian.Uint64(buf[HeaderLen:]))
				recvd.Add(1)
				if have {
					hist.add(time.Duration((r - lastR) - (s - lastS)))
				}
				lastS, lastR, have = s, r, true
			}
		}(st)
	}
	// Senders: a few goroutines share the phones. Like real phones, each
	// stream has its own phase within the 20 ms period: phone i sends in
	// the 1 ms slot i%20, so the relay sees a steady flow, not one burst
	// per period.
	const slots = 20
	shards := min(len(phones), 2*runtime.GOMAXPROCS(0))
	stop := make(chan struct{})
	var swg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for g := 0; g < shards; g++ {
		swg.Add(1)
		go func(g int) {
			defer swg.Done()
			var bySlot [slots][]*stream
			for i := g; i < len(phones); i += shards {
				bySlot[(i/shards)%slots] = append(bySlot[(i/shards)%slots], phones[i])
			}
			pkt := make([]byte, HeaderLen+160)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			next := int64(0) // the next 1 ms slot to serve
			for {
				select {
				case <-stop:
					return
				case now := <-tick.C:
					cur := int64(now.Sub(start) / time.Millisecond)
					for ; next <= cur; next++ {
						for _, st := range bySlot[next%slots] {
							AppendHeader(pkt[:0], false, PayloadPCMA, st.seq, uint32(st.seq)*160, st.ph.ssrc)
							st.seq++
							binary.BigEndian.PutUint64(pkt[HeaderLen:], uint64(time.Since(epoch)))
							if _, err := st.ph.conn.WriteToUDPAddrPort(pkt, st.to); err == nil {
								sent.Add(1)
							}
						}
					}
				}
			}
		}(g)
	}
	timer := time.NewTimer(dur)
	<-timer.C
	close(stop)
	swg.Wait()
	// Wait (bounded) for packets still in flight.
	deadline := time.Now().Add(3 * time.Second)
	for recvd.Load() < sent.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cpu := cpuTime() - cpu0
	for _, st := range phones {
		st.ph.conn.Close()
	}
	wg.Wait()
	res := loadResult{
		calls:       calls,
		duration:    dur,
		sent:        sent.Load(),
		recvd:       recvd.Load(),
		jitterP99:   hist.quantile(0.99),
		jitterMax:   time.Duration(hist.max.Load()),
		heapPerCall: (heap1 - heap0) / float64(calls),
		rssPerCall:  (rss1 - rss0) / float64(calls),
	}
	if res.sent > 0 {
		res.cpuPerPkt = cpu / time.Duration(res.sent)
	}
	return res
}

// BenchmarkConcurrentCalls holds PBX_BENCH_CALLS bridged calls (default
// 20) for PBX_BENCH_SECONDS seconds (default 3), G.711 20 ms both ways,
// and reports loss, added jitter p99 and memory per call. The figure of
// the issue is PBX_BENCH_CALLS=1000 PBX_BENCH_SECONDS=60. With
// PBX_BENCH_BASELINE=1 the same traffic is also sent phone to phone, and
// the difference in CPU per packet is reported as the relay's own.
func BenchmarkConcurrentCalls(b *testing.B) {
	calls := envInt("PBX_BENCH_CALLS", 20)
	secs := envInt("PBX_BENCH_SECONDS", 3)
	var res, base loadResult
	for b.Loop() {
		res = runLoad(b, calls, time.Duration(secs)*time.Second, false)
		if os.Getenv("PBX_BENCH_BASELINE") != "" {
			base = runLoad(b, calls, time.Duration(secs)*time.Second, true)
		}
	}
	if base.sent > 0 {
		relay := res.cpuPerPkt - base.cpuPerPkt
		b.ReportMetric(float64(relay.Nanoseconds()), "relay-cpu-ns/pkt")
		b.Logf("baseline without relay: cpu %v/pkt jitter p99 %v; relay's own cpu %v/pkt", base.cpuPerPkt, base.jitterP99, relay)
	}
	b.ReportMetric(float64(res.calls), "calls")
	b.ReportMetric(res.lossPct(), "loss-%")
	b.ReportMetric(float64(res.jitterP99.Microseconds()), "jitter-p99-µs")
	b.ReportMetric(float64(res.jitterMax.Microseconds()), "jitter-max-µs")
	b.ReportMetric(res.heapPerCall, "heap-B/call")
	b.ReportMetric(res.rssPerCall, "rss-B/call")
	b.ReportMetric(float64(res.cpuPerPkt.Nanoseconds()), "cpu-ns/pkt")
	b.Logf("%d calls for %v: sent %d received %d loss %.4f%% jitter p99 %v max %v heap %.0f B/call rss %.0f B/call cpu %v/pkt (phones included)",
		res.calls, res.duration, res.sent, res.recvd, res.lossPct(), res.jitterP99, res.jitterMax, res.heapPerCall, res.rssPerCall, res.cpuPerPkt)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestConcurrentCallsSmall runs the load helper at a small size and checks
// that every call's media went through both ways.
func TestConcurrentCallsSmall(t *testing.T) {
	res := runLoad(t, 10, time.Second, false)
	if res.sent < 10*2*20 {
		t.Fatalf("only %d packets sent", res.sent)
	}
	if res.lossPct() > 1 {
		t.Errorf("loss %.2f%% (%d of %d)", res.lossPct(), res.sent-res.recvd, res.sent)
	}
	t.Logf("sent %d received %d jitter p99 %v heap/call %.0f", res.sent, res.recvd, res.jitterP99, res.heapPerCall)
}
