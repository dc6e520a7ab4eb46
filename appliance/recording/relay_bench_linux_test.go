package recording

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"pbx/rtpcore"
)

// phonesEnv, set to a number of calls, turns the test binary into the
// phones of BenchmarkRecordedRelay (see TestMain).
const phonesEnv = "PBX_RELAY_PHONES"

// TestMain runs the package's tests, or, started by BenchmarkRecordedRelay
// with phonesEnv set, its phones.
func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(phonesEnv)); err == nil && n > 0 {
		if err := runPhones(n, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "phones:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkRecordedRelay measures what recording costs the relay: the
// CPU and the delay it adds. PBX_BENCH_CALLS calls (default 50) are bridged
// through a real relay; the phones run in a child process (this test
// binary again), so the CPU measured, the benchmark process's own, is the
// PBX's alone: relay, recording writer, runtime. Each phone sends a 20 ms
// PCMA packet every 20 ms, the phones spread over the period (1 ms slots),
// with its wall-clock send time in the payload; the receiving phone takes
// the kernel's receive timestamp (SO_TIMESTAMPNS), so the latency is the
// send call to the relay's own send, free of the receiving phone's
// scheduling. The variation is |L_i - L_(i-1)| of consecutive packets of a
// stream (RFC 3550's D with the relay as the path).
//
// The same calls alternate unrecorded and recorded phases of
// PBX_BENCH_SECONDS (default 5), PBX_BENCH_ROUNDS pairs (default 2) in
// ABBA order, so drift and other load on the machine fall on both; the
// figures are the means over the phases. The variation of a loaded
// machine moves from round to round far more than recording moves it, so
// the added variation is also reported as the median over rounds of each
// round's recorded less unrecorded p99 (rec-extra-var-p99-med-µs), the
// figure to judge; likewise the median of the rounds' CPU ratios. The
// issue's figures are 500 calls: at most 25% more CPU, variation p99
// within 0.2 ms.
//
// With PBX_BENCH_PROFILE set to a directory, the relay process's CPU is
// profiled during each measured phase, into plain-<round>.prof and
// rec-<round>.prof there (`go tool pprof -diff_base plain-0.prof
// rec-0.prof` shows what recording adds).
func BenchmarkRecordedRelay(b *testing.B) {
	calls, secs, rounds := envInt("PBX_BENCH_CALLS", 50), envInt("PBX_BENCH_SECONDS", 5), envInt("PBX_BENCH_ROUNDS", 2)
	var plain, rec phaseSum
	for b.Loop() {
		plain, rec = phaseSum{}, phaseSum{}
		runRecordedRelay(b, calls, time.Duration(secs)*time.Second, rounds, &plain, &rec)
	}
	var dVar, dCPU []float64
	for i := range min(len(plain.rounds), len(rec.rounds)) {
		p, r := plain.rounds[i], rec.rounds[i]
		dVar = append(dVar, float64(r.Var99-p.Var99)/1e3)
		if p.CPUPerPkt > 0 {
			dCPU = append(dCPU, 100*float64(r.CPUPerPkt-p.CPUPerPkt)/float64(p.CPUPerPkt))
		}
	}
	b.ReportMetric(median(dVar), "rec-extra-var-p99-med-µs")
	b.ReportMetric(median(dCPU), "rec-extra-cpu-med-%")
	b.Logf("per round, recorded less unrecorded: variation p99 %.0f µs, cpu %.1f %%", dVar, dCPU)
	for _, x := range []struct {
		prefix string
		s      *phaseSum
	}{{"", &plain}, {"rec-", &rec}} {
		m := x.s.mean()
		b.ReportMetric(float64(m.CPUPerPkt)/1e3, x.prefix+"cpu-µs/pkt")
		b.ReportMetric(float64(m.Lat50)/1e3, x.prefix+"lat-p50-µs")
		b.ReportMetric(float64(m.Lat99)/1e3, x.prefix+"lat-p99-µs")
		b.ReportMetric(float64(m.Var99)/1e3, x.prefix+"var-p99-µs")
	}
	p, r := plain.mean(), rec.mean()
	if p.CPUPerPkt > 0 {
		b.ReportMetric(100*float64(r.CPUPerPkt-p.CPUPerPkt)/float64(p.CPUPerPkt), "rec-extra-cpu-%")
	}
	b.ReportMetric(float64(r.Var99-p.Var99)/1e3, "rec-extra-var-p99-µs")
	b.ReportMetric(float64(rec.dropped), "rec-dropped-pkts")
}

// phaseStats is what one phase measured; durations in nanoseconds.
type phaseStats struct {
	Sent, Recvd          int64
	Lat50, Lat99, Lat999 int64
	Var99                int64
	Max                  int64
	CPUPerPkt            int64 // the PBX process's CPU per packet relayed
}

// phaseSum adds up phases of one kind.
type phaseSum struct {
	n       int
	sum     phaseStats
	rounds  []phaseStats // each phase, in round order
	dropped uint64
}

// median is the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (s *phaseSum) add(p phaseStats) {
	s.n++
	s.rounds = append(s.rounds, p)
	s.sum.Sent += p.Sent
	s.sum.Recvd += p.Recvd
	s.sum.Lat50 += p.Lat50
	s.sum.Lat99 += p.Lat99
	s.sum.Lat999 += p.Lat999
	s.sum.Var99 += p.Var99
	s.sum.Max = max(s.sum.Max, p.Max)
	s.sum.CPUPerPkt += p.CPUPerPkt
}

func (s *phaseSum) mean() phaseStats {
	if s.n == 0 {
		return phaseStats{}
	}
	n := int64(s.n)
	return phaseStats{Sent: s.sum.Sent / n, Recvd: s.sum.Recvd / n, Lat50: s.sum.Lat50 / n, Lat99: s.sum.Lat99 / n,
		Lat999: s.sum.Lat999 / n, Var99: s.sum.Var99 / n, Max: s.sum.Max, CPUPerPkt: s.sum.CPUPerPkt / n}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runRecordedRelay bridges calls calls to a child process's phones and
// runs rounds pairs of phases of dur, unrecorded and recorded.
func runRecordedRelay(b *testing.B, calls int, dur time.Duration, rounds int, plain, rec *phaseSum) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), phonesEnv+"="+strconv.Itoa(calls))
	cmd.Stderr = os.Stderr
	toChild, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	fromChild, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		toChild.Close()
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(fromChild)
	lines.Buffer(nil, 1<<20)
	readLine := func() string {
		if !lines.Scan() {
			b.Fatalf("phones ended: %v", lines.Err())
		}
		return lines.Text()
	}
	phonePorts := strings.Fields(readLine())
	if len(phonePorts) != 2*calls {
		b.Fatalf("phones sent %d ports for %d calls", len(phonePorts), calls)
	}

	e, err := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1"), Quarantine: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	dir := b.TempDir()
	s, err := New(Options{DataDir: dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	legs := make([][2]*rtpcore.Leg, calls)
	var legPorts []string
	for i := range legs {
		sess, err := e.NewSession(rtpcore.SessionOptions{ID: fmt.Sprint(i)})
		if err != nil {
			b.Fatal(err)
		}
		for j := range 2 {
			l, err := sess.NewLeg(fmt.Sprint(j))
			if err != nil {
				b.Fatal(err)
			}
			port, _ := strconv.Atoi(phonePorts[2*i+j])
			l.SetRemote(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)))
			legs[i][j] = l
			legPorts = append(legPorts, strconv.Itoa(l.Port()))
		}
		if err := sess.Bridge(legs[i][0], legs[i][1]); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := fmt.Fprintln(toChild, strings.Join(legPorts, " ")); err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second) // the phones start; the first phase needs them steady
	profDir := os.Getenv("PBX_BENCH_PROFILE")

	phase := func(record bool, round int) phaseStats {
		var recs []*Recorder
		if record {
			for i, l := range legs {
				r, err := s.Start(Sidecar{ID: fmt.Sprintf("20261121T151230.000Z-r%02d%05d", round, i), Tenant: "acme", Start: time.Now()},
					Legs{Caller: l[0], Callee: l[1], PayloadType: rtpcore.PayloadPCMA}, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				recs = append(recs, r)
			}
		}
		time.Sleep(500 * time.Millisecond) // settle: the writer's first rounds
		if profDir != "" {
			kind := "plain"
			if record {
				kind = "rec"
			}
			f, err := os.Create(filepath.Join(profDir, fmt.Sprintf("%s-%d.prof", kind, round)))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
		}
		fmt.Fprintln(toChild, "start")
		cpu0 := processCPU()
		time.Sleep(dur)
		cpu := processCPU() - cpu0
		fmt.Fprintln(toChild, "stop")
		if profDir != "" {
			pprof.StopCPUProfile()
		}
		var st phaseStats
		if err := json.Unmarshal([]byte(readLine()), &st); err != nil {
			b.Fatal(err)
		}
		if st.Recvd > 0 {
			st.CPUPerPkt = int64(cpu) / st.Recvd
		}
		for _, r := range recs {
			rec.dropped += r.Dropped()
			r.Stop(Sidecar{}, time.Now(), nil)
		}
		s.Wait()
		if record {
			// Keep the disk use of a long run to one phase's.
			_ = os.RemoveAll(filepath.Join(dir, recordingsDir, "2026"))
		}
		kind := "unrecorded"
		if record {
			kind = "recorded  "
		}
		b.Logf("round %d %s: %d pkts sent %d relayed, latency p50 %v p99 %v p99.9 %v max %v, variation p99 %v, cpu %v/pkt",
			round, kind, st.Sent, st.Recvd, time.Duration(st.Lat50), time.Duration(st.Lat99), time.Duration(st.Lat999),
			time.Duration(st.Max), time.Duration(st.Var99), time.Duration(st.CPUPerPkt))
		return st
	}
	for round := range rounds {
		// ABBA: unrecorded first in even rounds, recorded first in odd.
		for k := range 2 {
			record := (k == 1) != (round%2 == 1)
			st := phase(record, round)
			if record {
				rec.add(st)
			} else {
				plain.add(st)
			}
		}
	}
}

// latHist counts durations in 1 µs buckets up to 50 ms.
type latHist struct {
	buckets [50000]atomic.Uint64
	max     atomic.Int64
}

func (h *latHist) add(ns int64) {
	if ns < 0 {
		ns = 0
	}
	for m := h.max.Load(); ns > m && !h.max.CompareAndSwap(m, ns); m = h.max.Load() {
	}
	h.buckets[min(ns/1000, int64(len(h.buckets)-1))].Add(1)
}

func (h *latHist) reset() {
	for i := range h.buckets {
		h.buckets[i].Store(0)
	}
	h.max.Store(0)
}

// quantile is the upper edge of the bucket holding quantile q.
func (h *latHist) quantile(q float64) int64 {
	var total uint64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	want := uint64(q * float64(total))
	var acc uint64
	for i := range h.buckets {
		if acc += h.buckets[i].Load(); acc > want {
			return int64(i+1) * 1000
		}
	}
	return h.max.Load()
}

// runPhones is the child's side of BenchmarkRecordedRelay: it opens
// 2*calls phone sockets and writes their ports as one line, reads the legs'
// ports (one line, in the same order), then sends toward them and
// measures what comes back. "start" begins a measured phase, "stop" ends
// it and writes its phaseStats as one JSON line; end of input ends it.
func runPhones(calls int, in io.Reader, out io.Writer) error {
	conns := make([]*net.UDPConn, 2*calls)
	var ports []string
	for i := range conns {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		}); err != nil || serr != nil {
			return fmt.Errorf("SO_TIMESTAMPNS: %w", errors.Join(err, serr))
		}
		conns[i] = c
		ports = append(ports, strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port))
	}
	fmt.Fprintln(out, strings.Join(ports, " "))
	lines := bufio.NewScanner(in)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() {
		return fmt.Errorf("no leg ports: %w", lines.Err())
	}
	legPorts := strings.Fields(lines.Text())
	if len(legPorts) != len(conns) {
		return fmt.Errorf("%d leg ports for %d phones", len(legPorts), len(conns))
	}
	to := make([]netip.AddrPort, len(conns))
	for i, p := range legPorts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return err
		}
		to[i] = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(n))
	}

	var measuring atomic.Bool
	var sent, recvd atomic.Int64
	lat, vari := new(latHist), new(latHist)
	for _, c := range conns {
		go receive(c, &measuring, &recvd, lat, vari)
	}
	stop := make(chan struct{})
	defer close(stop)
	// Senders: like real phones, each stream has its own phase in the
	// 20 ms period: stream i sends in the 1 ms slot (i/shards)%20.
	const slots = 20
	shards := min(len(conns), 2*runtime.GOMAXPROCS(0))
	start := time.Now()
	for g := range shards {
		go func() {
			var bySlot [slots][]int
			for i := g; i < len(conns); i += shards {
				bySlot[(i/shards)%slots] = append(bySlot[(i/shards)%slots], i)
			}
			seqs := make([]uint16, len(conns))
			pkt := make([]byte, rtpcore.HeaderLen+160)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			next := int64(0)
			for {
				select {
				case <-stop:
					return
				case now := <-tick.C:
					for cur := int64(now.Sub(start) / time.Millisecond); next <= cur; next++ {
						for _, i := range bySlot[next%slots] {
							rtpcore.AppendHeader(pkt[:0], false, rtpcore.PayloadPCMA, seqs[i], uint32(seqs[i])*160, uint32(i+1))
							seqs[i]++
							binary.BigEndian.PutUint64(pkt[rtpcore.HeaderLen:], uint64(time.Now().UnixNano()))
							if _, err := conns[i].WriteToUDPAddrPort(pkt, to[i]); err == nil && measuring.Load() {
								sent.Add(1)
							}
						}
					}
				}
			}
		}()
	}
	for lines.Scan() {
		switch lines.Text() {
		case "start":
			lat.reset()
			vari.reset()
			sent.Store(0)
			recvd.Store(0)
			measuring.Store(true)
		case "stop":
			measuring.Store(false)
			st := phaseStats{Sent: sent.Load(), Recvd: recvd.Load(), Lat50: lat.quantile(0.5), Lat99: lat.quantile(0.99),
				Lat999: lat.quantile(0.999), Var99: vari.quantile(0.99), Max: lat.max.Load()}
			js, _ := json.Marshal(st)
			fmt.Fprintln(out, string(js))
		}
	}
	for _, c := range conns {
		c.Close()
	}
	return lines.Err()
}

// receive reads what the relay sends to phone c: the latency is the
// kernel's receive timestamp less the send time in the payload.
func receive(c *net.UDPConn, measuring *atomic.Bool, recvd *atomic.Int64, lat, vari *latHist) {
	buf := make([]byte, 2048)
	oob := make([]byte, unix.CmsgSpace(16))
	var lastSeq uint16
	var lastLat int64
	have := false
	for {
		n, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return
		}
		rx, ok := rxTimestamp(oob[:oobn])
		if !ok || n < rtpcore.HeaderLen+8 {
			continue
		}
		l := rx - int64(binary.BigEndian.Uint64(buf[rtpcore.HeaderLen:]))
		seq := binary.BigEndian.Uint16(buf[2:])
		if measuring.Load() {
			recvd.Add(1)
			lat.add(l)
			if have && seq == lastSeq+1 {
				d := l - lastLat
				vari.add(max(d, -d))
			}
		}
		lastSeq, lastLat, have = seq, l, true
	}
}

// rxTimestamp finds the SCM_TIMESTAMPNS control message in oob and
// returns its time in Unix nanoseconds.
func rxTimestamp(oob []byte) (int64, bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Len < unix.SizeofCmsghdr || int(h.Len) > len(oob) {
			return 0, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && int(h.Len) >= unix.CmsgLen(16) {
			d := oob[unix.CmsgLen(0):]
			sec := int64(binary.NativeEndian.Uint64(d))
			nsec := int64(binary.NativeEndian.Uint64(d[8:]))
			return sec*1e9 + nsec, true
		}
		oob = oob[min(unix.CmsgSpace(int(h.Len)-unix.SizeofCmsghdr), len(oob)):]
	}
	return 0, false
}
