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
// send call to the relay's own send, on one clock, free of the receiving
// phone's scheduling. A packet whose send call took longer than sendSlack
// is left out (its phone was descheduled between taking the time and
// sending: the harness's delay, not the relay's) and counted. The
// variation is |L_i - L_(i-1)| of consecutive packets of a stream (RFC
// 3550's D with the relay as the path); its p99 is taken over each 1 s
// window of a phase and the median of the windows is the phase's figure,
// so a burst of the machine's other load in one second of one phase does
// not decide it (the whole phase's p99 is reported too). Each phase also
// reports how long the PBX's threads waited for a CPU per second: on a
// shared machine that, not the relay, moves the latency most.
//
// The same calls alternate unrecorded and recorded phases of
// PBX_BENCH_SECONDS (default 5, at most 15), PBX_BENCH_ROUNDS pairs
// (default 2) in ABBA order, so drift and other load on the machine fall
// on both. The figures to judge are the medians over rounds of each
// round's paired difference, recorded less unrecorded: the CPU ratio
// (rec-extra-cpu-med-%) and the variation p99 (rec-extra-var-p99-med-µs);
// each round's are logged. The figures are 500 calls: at most 25%
// more CPU, variation p99 within 0.2 ms.
//
// With PBX_BENCH_PROFILE set to a directory, the relay process's CPU is
// profiled during each measured phase, into plain-<round>.prof and
// rec-<round>.prof there (`go tool pprof -diff_base plain-0.prof
// rec-0.prof` shows what recording adds).
func BenchmarkRecordedRelay(b *testing.B) {
	calls, secs, rounds := envInt("PBX_BENCH_CALLS", 50), envInt("PBX_BENCH_SECONDS", 5), envInt("PBX_BENCH_ROUNDS", 2)
	if secs > 15 {
		b.Fatalf("PBX_BENCH_SECONDS %d: a phase is at most 15 s (streamRing)", secs)
	}
	var plain, rec phaseSum
	for b.Loop() {
		plain, rec = phaseSum{}, phaseSum{}
		runRecordedRelay(b, calls, time.Duration(secs)*time.Second, rounds, &plain, &rec)
	}
	var dVar, dVarPhase, dCPU []float64
	for i := range min(len(plain.rounds), len(rec.rounds)) {
		p, r := plain.rounds[i], rec.rounds[i]
		dVar = append(dVar, float64(r.Var99Win-p.Var99Win)/1e3)
		dVarPhase = append(dVarPhase, float64(r.Var99-p.Var99)/1e3)
		if p.CPUPerPkt > 0 {
			dCPU = append(dCPU, 100*float64(r.CPUPerPkt-p.CPUPerPkt)/float64(p.CPUPerPkt))
		}
	}
	b.ReportMetric(median(dCPU), "rec-extra-cpu-med-%")
	b.ReportMetric(median(dVar), "rec-extra-var-p99-med-µs")
	b.ReportMetric(median(dVarPhase), "rec-extra-var-p99-phase-med-µs")
	b.Logf("per round, recorded less unrecorded: cpu %.1f %%, variation p99 (median of 1 s windows) %.0f µs, variation p99 (whole phase) %.0f µs",
		dCPU, dVar, dVarPhase)
	b.Logf("median over rounds: cpu %+.1f %%, variation p99 (median of 1 s windows) %+.0f µs, variation p99 (whole phase) %+.0f µs",
		median(dCPU), median(dVar), median(dVarPhase))
	for _, x := range []struct {
		prefix string
		s      *phaseSum
	}{{"", &plain}, {"rec-", &rec}} {
		m := x.s.mean()
		b.ReportMetric(float64(m.CPUPerPkt)/1e3, x.prefix+"cpu-µs/pkt")
		b.ReportMetric(float64(m.Lat50)/1e3, x.prefix+"lat-p50-µs")
		b.ReportMetric(float64(m.Lat99)/1e3, x.prefix+"lat-p99-µs")
		b.ReportMetric(float64(m.Var99Win)/1e3, x.prefix+"var-p99-µs")
	}
	b.ReportMetric(float64(rec.dropped), "rec-dropped-pkts")
}

// phaseStats is what one phase measured; durations in nanoseconds.
type phaseStats struct {
	Sent, Recvd          int64
	Lat50, Lat99, Lat999 int64
	Var99                int64 // over the whole phase
	Var99Win             int64 // the median over the phase's 1 s windows of each window's p99
	RunWait              int64 // the PBX process's threads waiting for a CPU, per second of the phase
	Max                  int64
	SlowTx               int64 // packets left out: their send call was slow (the harness's delay)
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
	s.sum.Var99Win += p.Var99Win
	s.sum.RunWait += p.RunWait
	s.sum.Max = max(s.sum.Max, p.Max)
	s.sum.CPUPerPkt += p.CPUPerPkt
}

func (s *phaseSum) mean() phaseStats {
	if s.n == 0 {
		return phaseStats{}
	}
	n := int64(s.n)
	return phaseStats{Sent: s.sum.Sent / n, Recvd: s.sum.Recvd / n, Lat50: s.sum.Lat50 / n, Lat99: s.sum.Lat99 / n,
		Lat999: s.sum.Lat999 / n, Var99: s.sum.Var99 / n, Var99Win: s.sum.Var99Win / n, RunWait: s.sum.RunWait / n, Max: s.sum.Max, CPUPerPkt: s.sum.CPUPerPkt / n}
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

// runQueueWait is how long the process's threads have waited on a run
// queue for a CPU so far (the second field of each thread's schedstat):
// the machine's other load, which moves the relay's latency from phase to
// phase whatever the relay does.
func runQueueWait() time.Duration {
	tasks, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			sum += n
		}
	}
	return time.Duration(sum)
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
		cpu0, wait0 := processCPU(), runQueueWait()
		time.Sleep(dur)
		cpu, wait := processCPU()-cpu0, runQueueWait()-wait0
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
		st.RunWait = int64(wait) * int64(time.Second) / int64(dur)
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
		// To stderr, not b.Logf: the testing package keeps only a
		// benchmark's first 10 lines of log, and a run of more than 4
		// rounds would lose its summary.
		fmt.Fprintf(os.Stderr, "round %d %s: %d pkts sent %d relayed (%d left out, slow send), latency p50 %v p99 %v p99.9 %v max %v, variation p99 %v (1 s windows' median) %v (phase), cpu %v/pkt, waited for a cpu %v/s\n",
			round, kind, st.Sent, st.Recvd, st.SlowTx, time.Duration(st.Lat50), time.Duration(st.Lat99), time.Duration(st.Lat999),
			time.Duration(st.Max), time.Duration(st.Var99Win), time.Duration(st.Var99), time.Duration(st.CPUPerPkt), time.Duration(st.RunWait))
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
	streams := make([]*streamLog, len(conns))
	for i := range streams {
		streams[i] = new(streamLog)
	}
	for i, c := range conns {
		go receive(c, streams[i^1]) // phone i receives what its peer, i^1, sent
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
							seq := seqs[i]
							seqs[i]++
							rtpcore.AppendHeader(pkt[:0], false, rtpcore.PayloadPCMA, seq, uint32(seq)*160, uint32(i+1))
							streams[i].sending(seq)
							t0 := time.Now()
							binary.BigEndian.PutUint64(pkt[rtpcore.HeaderLen:], uint64(t0.UnixNano()))
							_, err := conns[i].WriteToUDPAddrPort(pkt, to[i])
							streams[i].sent(seq, err == nil && measuring.Load(), time.Since(t0))
						}
					}
				}
			}
		}()
	}
	for lines.Scan() {
		switch lines.Text() {
		case "start":
			for _, s := range streams {
				s.reset()
			}
			measuring.Store(true)
		case "stop":
			measuring.Store(false)
			// What is still in flight arrives; the relay's latency is
			// a few milliseconds even on a loaded machine.
			time.Sleep(100 * time.Millisecond)
			js, _ := json.Marshal(phaseFigures(streams))
			fmt.Fprintln(out, string(js))
		}
	}
	for _, c := range conns {
		c.Close()
	}
	return lines.Err()
}

// sendSlack is how long a phone's send call may take before the packet is
// left out of the figures: its time stamp was taken before the call, so a
// phone descheduled in between (the harness, not the relay) would count
// its own wait as the relay's latency. On loopback the call delivers the
// packet to the relay's socket itself, in some 10 µs.
const sendSlack = 100 * time.Microsecond

// streamRing is how many packets of a stream a phase can hold (20 s of
// 20 ms packets); a phase is at most 15 s (BenchmarkRecordedRelay).
const streamRing = 1024

// streamLog is what one stream's packets did in a phase, by sequence
// number modulo streamRing: state says whether the packet was sent in the
// phase (and whether its send was slow), lat is its latency once it came
// back (0 until then).
type streamLog struct {
	state [streamRing]atomic.Uint32
	lat   [streamRing]atomic.Int64
}

// A packet's state.
const (
	pktNone   = iota // not sent in the phase
	pktSent          // sent in the phase, in time
	pktSlowTx        // sent in the phase, but the send call was slow
)

func (l *streamLog) reset() {
	for i := range l.state {
		l.state[i].Store(pktNone)
		l.lat[i].Store(0)
	}
}

// sending forgets what the ring held at seq's place, before seq goes.
func (l *streamLog) sending(seq uint16) { l.lat[seq%streamRing].Store(0) }

// sent notes packet seq sent, in the phase or not, its send call taking
// took.
func (l *streamLog) sent(seq uint16, inPhase bool, took time.Duration) {
	st := uint32(pktNone)
	switch {
	case inPhase && took > sendSlack:
		st = pktSlowTx
	case inPhase:
		st = pktSent
	}
	l.state[seq%streamRing].Store(st)
}

// phaseFigures computes a phase's figures from every stream's log:
// latency quantiles over the packets sent in time, and the variation
// |L_i - L_(i-1)| over consecutive pairs of them.
func phaseFigures(streams []*streamLog) phaseStats {
	var st phaseStats
	var lats, vars []int64
	var win [][]int64 // the variations of each 1 s window
	for _, s := range streams {
		// The stream's packets in the phase follow one another in the
		// ring from where the phase began; k counts from there.
		prev, first := int64(-1), phaseStart(s)
		for k := range streamRing {
			i := (first + k) % streamRing
			state, l := s.state[i].Load(), s.lat[i].Load()
			if state != pktNone {
				st.Sent++
			}
			if l != 0 && state != pktNone {
				st.Recvd++
			}
			if state != pktSent || l == 0 {
				if state == pktSlowTx {
					st.SlowTx++
				}
				prev = -1
				continue
			}
			lats = append(lats, l)
			if prev >= 0 {
				d := l - prev
				vars = append(vars, max(d, -d))
				w := k / 50 // 50 packets a second
				for len(win) <= w {
					win = append(win, nil)
				}
				win[w] = append(win[w], max(d, -d))
			}
			prev = l
		}
	}
	slices.Sort(lats)
	slices.Sort(vars)
	q := func(s []int64, q float64) int64 {
		if len(s) == 0 {
			return 0
		}
		return s[min(int(q*float64(len(s))), len(s)-1)]
	}
	st.Lat50, st.Lat99, st.Lat999, st.Var99 = q(lats, 0.5), q(lats, 0.99), q(lats, 0.999), q(vars, 0.99)
	if len(lats) > 0 {
		st.Max = lats[len(lats)-1]
	}
	var w99 []float64
	for _, w := range win {
		if len(w) >= 1000 { // a whole second of the streams
			slices.Sort(w)
			w99 = append(w99, float64(q(w, 0.99)))
		}
	}
	st.Var99Win = int64(median(w99))
	return st
}

// phaseStart is where in s's ring the phase's packets begin: the first
// packet sent in the phase after one that was not.
func phaseStart(s *streamLog) int {
	for i := range streamRing {
		if s.state[i].Load() != pktNone && s.state[(i+streamRing-1)%streamRing].Load() == pktNone {
			return i
		}
	}
	return 0
}

// receive reads what the relay sends to phone c, from the stream l: the
// latency is the kernel's receive timestamp less the send time in the
// payload.
func receive(c *net.UDPConn, l *streamLog) {
	buf := make([]byte, 2048)
	oob := make([]byte, 256)
	for {
		n, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return
		}
		rx, ok := rxTimestamp(oob[:oobn])
		if !ok || n < rtpcore.HeaderLen+8 {
			continue
		}
		seq := binary.BigEndian.Uint16(buf[2:])
		l.lat[seq%streamRing].Store(max(1, rx-int64(binary.BigEndian.Uint64(buf[rtpcore.HeaderLen:]))))
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
