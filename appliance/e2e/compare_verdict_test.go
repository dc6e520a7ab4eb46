package e2e

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompareVerdicts checks the pass rule and the table cells of
// BenchmarkCompareKamailio on made-up SIPp statistics, without running it.
func TestCompareVerdicts(t *testing.T) {
	ok := func(created, okN, failed, retrans int, p99 time.Duration) sippStats {
		return sippStats{Created: created, OK: okN, Failed: failed, Retrans: retrans, SetupP99: p99}
	}
	w := 10 * time.Second
	cases := []struct {
		name             string
		step             compareStep
		sustained, clean bool
	}{
		{"all done, fast", judgeStep(100, 1000, ok(1000, 1000, 0, 0, 20*time.Millisecond), w), true, true},
		{"slow p99", judgeStep(100, 1000, ok(1000, 1000, 0, 0, 100*time.Millisecond), w), true, false},
		{"retransmissions", judgeStep(100, 1000, ok(1000, 1000, 0, 3, 5*time.Millisecond), w), true, false},
		{"p99 beyond the buckets", judgeStep(100, 1000, ok(1000, 1000, 0, 0, -1), w), true, false},
		{"1% failed", judgeStep(100, 1000, ok(1000, 990, 10, 0, 5*time.Millisecond), w), false, false},
		{"under 95% of the rate", judgeStep(100, 1000, ok(1000, 940, 0, 0, 5*time.Millisecond), w), false, false},
		{"fewer created than offered", judgeStep(100, 1000, ok(900, 900, 0, 0, 5*time.Millisecond), 9*time.Second), false, false},
	}
	for _, c := range cases {
		if c.step.sustained != c.sustained || c.step.clean != c.clean {
			t.Errorf("%s: sustained %t clean %t, want %t %t", c.name, c.step.sustained, c.step.clean, c.sustained, c.clean)
		}
	}

	l := ladder{rates: []int{100, 200, 300, 400}, steps: []compareStep{
		{rate: 100, sustained: true},
		{rate: 200, sustained: true, clean: true},
		{rate: 300, sustained: true},
		{rate: 400},
	}}
	if best, _ := l.best(); best.rate != 300 {
		t.Errorf("best %d, want 300", best.rate)
	}
	if clean, _ := l.lastClean(); clean.rate != 200 {
		t.Errorf("highest clean %d, want 200", clean.rate)
	}
	if l.topped() || !strings.HasPrefix(ladderCell(l), "300/s") {
		t.Errorf("a ladder that failed at 400 shows %q", ladderCell(l))
	}
	l.steps = l.steps[:3]
	l.rates = l.rates[:3]
	if !l.topped() || !strings.HasPrefix(ladderCell(l), ">= 300/s") {
		t.Errorf("a ladder sustained to its top shows %q", ladderCell(l))
	}
	if c := ladderCell(ladder{rates: []int{100}, steps: []compareStep{{rate: 100}}}); c != "under 100/s" {
		t.Errorf("nothing sustained shows %q", c)
	}
	if r := ratio(-5, 10); r != 0 {
		t.Errorf("ratio of a negative memory delta %v, want none", r)
	}
}

// TestAnsweredCalls reads the setups a SIPp statistics file has timed.
func TestAnsweredCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "uac.stat.csv")
	if n := answeredCalls(path); n != 0 {
		t.Fatalf("no file: %d", n)
	}
	csv := "StartTime;TotalCallCreated;ResponseTimeRepartitionsetup_<5;ResponseTimeRepartitionsetup_<10;ResponseTimeRepartitionsetup_>=10;\n" +
		"x;10;1;0;0;\nx;20;7;2;1;\n"
	if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := answeredCalls(path); n != 10 {
		t.Fatalf("answered %d, want 10 (the last line's buckets)", n)
	}
}

// TestCompareTargets checks the verdicts of issue 16's targets on made-up
// results: each could go either way.
func TestCompareTargets(t *testing.T) {
	sus := func(rate int) compareStep { return compareStep{rate: rate, sustained: true} }
	k := ladder{rates: []int{100, 200, 300}, steps: []compareStep{sus(100), sus(200), {rate: 300}}}
	if r := at80(k); r != 160 {
		t.Errorf("80%% of 200/s: %d", r)
	}
	if r := at80(ladder{rates: []int{12000}, steps: []compareStep{sus(12000)}}); r != 9600 {
		t.Errorf("80%% of 12000/s: %d", r)
	}
	if r := at80(ladder{rates: []int{100}, steps: []compareStep{{rate: 100}}}); r != 0 {
		t.Errorf("80%% of nothing sustained: %d", r)
	}
	for _, c := range []struct {
		p    ladder
		want string
	}{
		{ladder{rates: k.rates, steps: []compareStep{sus(100), {rate: 200}}}, verdictNotMet},
		{ladder{rates: k.rates, steps: []compareStep{sus(100), sus(200), {rate: 300}}}, verdictMet},
		{ladder{rates: k.rates, steps: []compareStep{sus(100), sus(200), sus(300)}}, verdictMet},
		{ladder{rates: k.rates, steps: []compareStep{{rate: 100}}}, verdictNotMet},
	} {
		if got := rateVerdict(k, c.p); got != c.want {
			t.Errorf("rate verdict of %v against %v: %s, want %s", c.p.steps, k.steps, got, c.want)
		}
	}

	step := func(p99 time.Duration, retrans int, sustained bool) compareStep {
		return compareStep{rate: 160, sustained: sustained, stats: sippStats{SetupP99: p99, Retrans: retrans}}
	}
	for _, c := range []struct {
		s         compareStep
		max       time.Duration
		noRetrans bool
		want      string
	}{
		{step(20*time.Millisecond, 0, true), targetRegisterP99, true, verdictMet},
		{step(50*time.Millisecond, 0, true), targetRegisterP99, true, verdictMet}, // the bucket under 50 ms
		{step(100*time.Millisecond, 0, true), targetRegisterP99, true, verdictNotMet},
		{step(20*time.Millisecond, 1, true), targetRegisterP99, true, verdictNotMet},
		{step(20*time.Millisecond, 1, true), targetSetupP99, false, verdictMet},
		{step(20*time.Millisecond, 0, false), targetSetupP99, false, verdictNotMet},
		{step(-1, 0, true), targetSetupP99, false, verdictNotMet},
	} {
		if got := stepVerdict(c.s, c.max, c.noRetrans); got != c.want {
			t.Errorf("step p99 %s retrans %d sustained %t against %s: %s, want %s",
				c.s.stats.SetupP99, c.s.stats.Retrans, c.s.sustained, c.max, got, c.want)
		}
	}
	if got := stepVerdict(compareStep{}, targetSetupP99, false); !strings.HasPrefix(got, "n/a") {
		t.Errorf("no 80%% step: %s", got)
	}

	calls := func(cpu time.Duration, ok int) compareStep {
		return compareStep{rate: 500, sustained: true, serverCPU: cpu, stats: sippStats{OK: ok}}
	}
	off := []compareStep{calls(time.Second, 1000), calls(3*time.Second, 1000)} // 2 ms per call
	if over, ok := recordsOverhead(off, []compareStep{calls(2200*time.Millisecond, 1000)}); !ok || over < 0.099 || over > 0.101 {
		t.Errorf("records overhead %v %t, want 10%%", over, ok)
	}
	if got := recordsVerdict(off, []compareStep{calls(2200*time.Millisecond, 1000)}); got != verdictMet {
		t.Errorf("10%% more: %s", got)
	}
	if got := recordsVerdict(off, []compareStep{calls(2400*time.Millisecond, 1000)}); got != verdictNotMet {
		t.Errorf("20%% more: %s", got)
	}
	short := calls(2400*time.Millisecond, 1000)
	short.sustained = false
	if got := recordsVerdict(off, []compareStep{short}); got != verdictNotMet+" (a step not sustained)" {
		t.Errorf("20%% more, not sustained: %s", got)
	}
	if got := recordsVerdict(nil, []compareStep{calls(time.Second, 1000)}); !strings.HasPrefix(got, "n/a") {
		t.Errorf("records off not measured: %s", got)
	}
	if c := recordsCell(off, []compareStep{calls(2400*time.Millisecond, 1000)}); c != "median 2000.0 us (1000.0, 3000.0) -> 2400.0 us: +20%" {
		t.Errorf("records cell %q", c)
	}
	// One run far off, either way, does not move the verdict; the runs
	// that agree do.
	ms := func(ds ...float64) []compareStep {
		var st []compareStep
		for _, d := range ds {
			st = append(st, calls(time.Duration(d*float64(time.Second)), 1000))
		}
		return st
	}
	for _, c := range []struct {
		off, on []compareStep
		over    float64
		want    string
	}{
		{ms(1.0, 1.05, 1.1), ms(1.1, 1.15, 2.0), 0.095, verdictMet},  // the mean: +35%
		{ms(0.7, 1.0, 1.05), ms(1.1, 1.12, 1.14), 0.12, verdictMet},  // the mean: +22%
		{ms(1.0, 1.0, 1.0), ms(1.2, 1.25, 0.9), 0.20, verdictNotMet}, // the mean: +12%
	} {
		over, ok := recordsOverhead(c.off, c.on)
		if !ok || math.Abs(over-c.over) > 0.001 || recordsVerdict(c.off, c.on) != c.want {
			t.Errorf("records overhead of %s: %v %t %s, want %v %s", recordsCell(c.off, c.on), over, ok, recordsVerdict(c.off, c.on), c.over, c.want)
		}
	}

	if m := (regMemory{idle: 100, after: 120}); memVerdict(m) != verdictMet {
		t.Errorf("back to 1.2 x idle: %s", memVerdict(m))
	}
	if m := (regMemory{idle: 100, after: 121}); memVerdict(m) != verdictNotMet {
		t.Errorf("over 1.2 x idle: %s", memVerdict(m))
	}
	if c := regMemCell(regMemory{idle: 1024, peak: 10240, after: 2048, wait: 30 * time.Second, back: -1}); c != "1.0 MB / 10.0 MB / 2.0 MB (not within 20% of idle in 30s)" {
		t.Errorf("memory cell %q", c)
	}

	shedding := func(p99 time.Duration) ladder {
		return ladder{rates: k.rates, steps: []compareStep{sus(100), {rate: 200, stats: sippStats{SetupP99: p99}}}}
	}
	if got := shedVerdict(shedding(20 * time.Millisecond)); got != verdictMet {
		t.Errorf("overloaded with a short p99: %s", got)
	}
	if got := shedVerdict(shedding(0)); got != verdictMet {
		t.Errorf("overloaded, everything refused at once: %s", got)
	}
	if got := shedVerdict(shedding(2 * time.Second)); got != verdictNotMet {
		t.Errorf("overloaded with seconds of latency: %s", got)
	}
	if got := shedVerdict(shedding(-1)); got != verdictNotMet {
		t.Errorf("overloaded past the buckets: %s", got)
	}
	if got := shedVerdict(ladder{rates: k.rates, steps: []compareStep{sus(100)}}); !strings.HasPrefix(got, "n/a") {
		t.Errorf("never overloaded: %s", got)
	}
}

// TestCompareTable checks that the table has a row with a verdict for each
// target it measures, on made-up results where the PBX meets some.
func TestCompareTable(t *testing.T) {
	cfg := loadCompareConfig()
	sus := func(rate int, p99 time.Duration) compareStep {
		return compareStep{rate: rate, sustained: true, stats: sippStats{SetupP99: p99, OK: 1000}, serverCPU: time.Second}
	}
	k := &compareResult{
		register: ladder{rates: []int{100, 200}, steps: []compareStep{sus(100, 5*time.Millisecond), sus(200, 5*time.Millisecond)}},
		invite:   ladder{rates: []int{100, 200}, steps: []compareStep{sus(100, 5*time.Millisecond), {rate: 200}}},
		regAt80:  sus(160, 5*time.Millisecond), inviteAt80: sus(80, 5*time.Millisecond),
		regCPU: 100 * time.Microsecond, regCPUStep: sus(100, 0), shed503: -1, queueDropped: -1,
		callCPU: []compareStep{sus(50, 0)},
		held:    heldCalls{up: 10, kBPerCall: 12, cpuPerPacket: 12 * time.Microsecond},
		// rtpengine realtime: cheaper per packet, so the PBX is judged against it.
		heldRT: heldCalls{up: 10, kBPerCall: 13, cpuPerPacket: 8 * time.Microsecond,
			probe: rtpProbe{sent: 2000, received: 2000, jitterP99: 100 * time.Microsecond, readP99: 3 * time.Millisecond}},
		heldHigh: heldCalls{up: 2000, kBPerCall: 12, cpuPerPacket: 4 * time.Microsecond, packetsPerS: 160000,
			probe: rtpProbe{sent: 1400, received: 1400, jitterP99: 2 * time.Millisecond, readP99: 5 * time.Millisecond}},
		regMem: regMemory{idle: 1000, peak: 2000, after: 1900, back: -1, wait: 30 * time.Second},
	}
	p := &compareResult{
		register: ladder{rates: []int{100, 200}, steps: []compareStep{sus(100, 5*time.Millisecond), {rate: 200, stats: sippStats{SetupP99: -1}}}},
		invite:   ladder{rates: []int{100, 200}, steps: []compareStep{sus(100, 5*time.Millisecond), {rate: 200}}},
		regAt80:  sus(160, 200*time.Millisecond), inviteAt80: sus(80, 50*time.Millisecond),
		regCPU: 90 * time.Microsecond, regCPUStep: sus(100, 0), shed503: 42, queueDropped: 0,
		callCPU: []compareStep{sus(50, 0)}, callCPUOff: []compareStep{sus(50, 0)},
		held: heldCalls{up: 10, kBPerCall: 18, cpuPerPacket: 5 * time.Microsecond,
			probe: rtpProbe{sent: 2000, received: 1999, jitterP99: 300 * time.Microsecond, readP99: 2 * time.Millisecond}},
		heldHigh: heldCalls{up: 2000, kBPerCall: 11, cpuPerPacket: 3 * time.Microsecond, packetsPerS: 150000,
			probe: rtpProbe{sent: 1400, received: 1400, jitterP99: 1200 * time.Microsecond, readP99: 3 * time.Millisecond}},
		regMem: regMemory{idle: 1000, peak: 5000, after: 1100, back: 10 * time.Second, wait: 30 * time.Second},
	}
	table := compareTable(cfg, k, p, time.Minute)
	for _, want := range []string{
		"| 1. REGISTER + digest, highest sustained | >= 200/s, p99 < 5ms, 0 retransmissions | 100/s, p99 < 5ms, 0 retransmissions | 0.50 | >= Kamailio's | not met |",
		"| 1. REGISTER at 80% of Kamailio's sustained (160/s) | p99 < 5ms, 0 retransmissions | p99 < 200ms, 0 retransmissions | — | p99 < 50ms, 0 retransmissions | not met |",
		"| 0.90 (better) | <= Kamailio's | met |",
		"| 2. INVITE at 80% of Kamailio's sustained (80/s) | p99 < 5ms, 0 retransmissions | p99 < 50ms, 0 retransmissions | — | p99 setup < 100ms | met |",
		"1000.0 us -> 1000.0 us: +0% | 1.00 | on <= off + 15% | met |",
		"| as shipped: 12.0 us (rtpengine, 0 packets/s); realtime: 8.0 us (rtpengine, 0 packets/s) | 5.0 us (pbx, 0 packets/s) | 0.63 (better) | <= 0.5 x rtpengine's | not met |",
		"| as shipped: —; realtime: jitter p99 100µs (3ms as read), loss 0.00% (2000 of 2000 packets arrived) | jitter p99 300µs (2ms as read), loss 0.05% (1999 of 2000 packets arrived) | 3.00 | jitter < 1 ms, loss < 0.1% | met |",
		"| 3. 2000 relayed calls held 60 s: probe jitter p99 and loss; CPU per packet | jitter p99 2ms (5ms as read), loss 0.00% (1400 of 1400 packets arrived); 4.0 us (rtpengine, 160000 packets/s) | jitter p99 1.2ms (3ms as read), loss 0.00% (1400 of 1400 packets arrived); 3.0 us (pbx, 150000 packets/s) | 0.60 (better) | jitter < 1 ms, loss < 0.1% | not met (75% of the calls' nominal packets were relayed: the host did not carry the load) |",
		"| 4. Memory per held call, 1000 calls | 12.0 kB | 18.0 kB | 1.50 | <= Kamailio's | not met |",
		"| 1.0 MB / 4.9 MB / 1.1 MB (within 20% after 10s) | 2.50 | <= 1.2 x idle 30s after | met |",
		"| not counted; every step sustained | 42 503s, 0 dropped; at 200/s p99 >= 5s, 0.0% failed | — | sheds: p99 < 1s | not met |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	// The many calls held 60 s not met with every packet sent, met, and
	// not run.
	p.heldHigh.packetsPerS = 200000
	if row := heldHighRow(cfg, k, p); row.met != verdictNotMet {
		t.Errorf("jitter 1.2 ms, every packet sent: %q", row.met)
	}
	p.heldHigh.probe.jitterP99 = 900 * time.Microsecond
	if row := heldHighRow(cfg, k, p); row.met != verdictMet {
		t.Errorf("jitter 0.9 ms, no loss: %q", row.met)
	}
	cfg.callsHigh = 0
	if row := heldHighRow(cfg, k, p); row.met != "n/a: not run (PBX_COMPARE_CALLS_HIGH=0)" || row.pbx != verdictNone {
		t.Errorf("not run: %+v", row)
	}
}

// TestRTPProbe checks the probe's figures and its measuring loop through a
// UDP forwarder on loopback (standing for the relay) that drops every tenth
// packet.
func TestRTPProbe(t *testing.T) {
	ms := time.Millisecond
	p := probeStats(200, []time.Duration{3 * ms, 1 * ms, 2 * ms, 9 * ms}, []time.Duration{3 * ms, 1 * ms, 2 * ms, 19 * ms})
	if p.received != 4 || p.jitterP99 != 8*ms || p.readP99 != 18*ms || p.loss() != 98 {
		t.Errorf("stats %+v, loss %.1f%%", p, p.loss())
	}
	rtts := make([]time.Duration, 1000)
	for i := range rtts {
		rtts[i] = ms
	}
	rtts[0], rtts[1] = 50*ms, 40*ms // the two slowest are past the 99th percentile
	if p := probeStats(1000, rtts, rtts); p.jitterP99 != 0 || probeVerdict(p) != verdictMet {
		t.Errorf("1000 round trips of 1 ms but 2: jitter p99 %s, verdict %s", p.jitterP99, probeVerdict(p))
	}
	if v := probeVerdict(probeStats(1000, rtts[:998], rtts[:998])); v != verdictNotMet {
		t.Errorf("0.2%% lost: %s", v)
	}
	if v := probeVerdict(rtpProbe{err: "probe call not answered"}); !strings.HasPrefix(v, "n/a") {
		t.Errorf("no probe: %s", v)
	}

	if a, ok := relayFromLog("2026-11-23 relay 127.0.0.1 40002\n"); !ok || a.String() != "127.0.0.1:40002" {
		t.Errorf("relay from log: %v %t", a, ok)
	}
	if _, ok := relayFromLog("relay 127.0.0.1\n"); ok {
		t.Error("a line without a port gave an address")
	}

	bind := func() *net.UDPConn {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	relay, from, to := bind(), bind(), bind()
	go func() {
		buf := make([]byte, 1500)
		for i := 0; ; i++ {
			n, err := relay.Read(buf)
			if err != nil {
				return
			}
			if i%10 != 9 {
				_, _ = relay.WriteToUDP(buf[:n], to.LocalAddr().(*net.UDPAddr))
			}
		}
	}()
	c := &probeCall{from: from, to: to, relay: relay.LocalAddr().(*net.UDPAddr)}
	// A packet's arrival is the kernel's stamp, not when it was read. On
	// a loaded host the kernel may deliver (and stamp) a loopback datagram
	// late, from ksoftirqd (CI saw 30 ms), so the check gets a few tries.
	if err := c.stampArrivals(); err != nil {
		t.Fatal(err)
	}
	var stampErr string
	for range 5 {
		sentAt := time.Now()
		if _, err := from.WriteToUDP([]byte("stamp"), to.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // read well after the arrival
		oob := make([]byte, 128)
		_, oobn, _, _, err := to.ReadMsgUDP(make([]byte, 64), oob)
		read := time.Now()
		at, ok := arrival(oob[:oobn])
		if err == nil && ok && !at.Before(sentAt.Add(-time.Millisecond)) && read.Sub(at) >= 25*time.Millisecond {
			stampErr = ""
			break
		}
		stampErr = fmt.Sprintf("arrival stamp %v (%t, err %v): sent at %v, read at %v", at, ok, err, sentAt, read)
	}
	if stampErr != "" {
		t.Error(stampErr)
	}
	got := c.run(300 * time.Millisecond)
	if got.sent != 60 || got.received != got.sent-got.sent/10 {
		t.Errorf("sent %d, %d arrived; want every tenth lost", got.sent, got.received)
	}
	if got.jitterP99 <= 0 || got.jitterP99 > 100*ms || got.readP99 <= 0 || got.readP99 > 100*ms {
		t.Errorf("jitter p99 through the forwarder %s (%s as read)", got.jitterP99, got.readP99)
	}
}

// TestCompareCallsHigh checks that PBX_COMPARE_CALLS_HIGH=0 skips the many
// calls held 60 s, as the README's quick run asks, and that they run by
// default.
func TestCompareCallsHigh(t *testing.T) {
	t.Setenv("PBX_COMPARE_CALLS_HIGH", "")
	if n := loadCompareConfig().callsHigh; n != 2000 {
		t.Errorf("default: %d calls, want 2000", n)
	}
	t.Setenv("PBX_COMPARE_CALLS_HIGH", "0")
	if n := loadCompareConfig().callsHigh; n != 0 {
		t.Errorf("PBX_COMPARE_CALLS_HIGH=0: %d calls, want none", n)
	}
}
