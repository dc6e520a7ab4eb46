package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/sipcore/calls"
)

// The benchmarks below measure the built pbx under load on loopback, driven by
// SIPp (SIP) and wrk (HTTP). Each invocation starts its own PBX, runs one
// bounded load and reports figures with b.ReportMetric; b.N is not used, and
// every run lasts well over the default -benchtime, so `go test -bench` runs
// each once. They run only with -bench (make bench), never in make test.
//
// Sizes are small by default so that make bench stays short; environment
// variables (named in each benchmark's comment) raise them. The PBX logs at
// info level here, as in production: debug logs every SIP message.

// benchRTPMin..benchRTPMax is the RTP range of the load benchmarks. A call
// holds two port pairs (one per leg) and a released port rests for
// rtpcore.DefaultQuarantine (5s), so R calls per second need about 20*R
// ports: 14,000 pairs here carry about 1,400 calls per second. The range is
// inside the kernel's ephemeral range; the port pool skips a port another
// process holds.
const (
	benchRTPMin = 33000
	benchRTPMax = 60998
)

func benchEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchEnvCount is benchEnvInt where 0 is a value: none.
func benchEnvCount(name string, def int) int {
	if os.Getenv(name) == "0" {
		return 0
	}
	return benchEnvInt(name, def)
}

func benchEnvDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchEnvInts reads a comma-separated list of positive integers.
func benchEnvInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return def
		}
		out = append(out, n)
	}
	return out
}

// benchAccounts returns n Account documents of tenant demo (users u00000...,
// extensions from 2000) and their names.
func benchAccounts(n int) (string, []string) {
	var b strings.Builder
	users := make([]string, n)
	for i := range n {
		users[i] = fmt.Sprintf("u%05d", i)
		fmt.Fprintf(&b, `---
configVersion: pbx/v1
kind: Account
metadata: {name: %s, tenant: demo}
spec:
  password: %s-secret
  extension: "%d"
`, users[i], users[i], 2000+i)
	}
	return b.String(), users
}

// registerScenario writes the scenario directory of procs SIPp processes
// sending REGISTERs: users split among their accounts files (reg<i>.csv),
// and a free local port for each.
func registerScenario(b *testing.B, users []string, procs int) (dir string, ports []int) {
	b.Helper()
	csv := map[string]string{}
	for i := range procs {
		csv[fmt.Sprintf("reg%d.csv", i)] = credentials(users[i*len(users)/procs : (i+1)*len(users)/procs]...)
	}
	dir = scenarioDir(b, csv)
	ports = make([]int, procs)
	for i := range ports {
		ports[i] = freePort(b)
	}
	return dir, ports
}

// startRegisterLoad starts one SIPp process per port in ports sending
// register.xml to the PBX at sipPort: together rate REGISTERs a second
// for step, each process with its own accounts file (reg<i>.csv). It
// returns the processes and how many REGISTERs they offer in all.
func startRegisterLoad(b *testing.B, dir, name string, sipPort int, ports []int, rate int, step time.Duration) (runs []*sippRun, offered int) {
	b.Helper()
	procs := len(ports)
	n := rate * int(step/time.Second) / procs
	runs = make([]*sippRun, procs)
	for i := range procs {
		runs[i] = startSIPpLoad(b, dir, fmt.Sprintf("%s%d-%d", name, rate, i), step+2*time.Minute,
			fmt.Sprintf("127.0.0.1:%d", sipPort), "-sf", "register.xml", "-inf", fmt.Sprintf("reg%d.csv", i),
			"-r", strconv.Itoa(rate/procs), "-rp", "1000", "-m", strconv.Itoa(n), "-l", "5000",
			"-recv_timeout", "10000", "-p", strconv.Itoa(ports[i]), "-i", "127.0.0.1", "-t", "u1")
	}
	return runs, n * procs
}

// startSIPpLoad starts SIPp for load: like startSIPp, but without the
// per-message trace (it would cost SIPp more than the PBX) and with a
// statistics file read by stats.
func startSIPpLoad(t testing.TB, dir, name string, timeout time.Duration, args ...string) *sippRun {
	t.Helper()
	args = append(args, "-trace_stat", "-stf", filepath.Join(dir, name+".stat.csv"), "-fd", "1",
		"-buff_size", "4194304")
	return startSIPpArgs(t, dir, name, timeout, args...)
}

// startSIPpArgs starts SIPp with exactly args plus the error trace (no message
// trace, which would cost SIPp more than the load it generates); the run is
// bounded by timeout.
func startSIPpArgs(t testing.TB, dir, name string, timeout time.Duration, args ...string) *sippRun {
	t.Helper()
	return launchSIPp(t, dir, name, timeout, false, args...)
}

// sippStats is the last line of a SIPp statistics file (cumulative counters).
type sippStats struct {
	Created, OK, Failed, Retrans int
	Start, End                   time.Time     // of the run, as SIPp saw it
	Setup                        time.Duration // mean of the scenario's "setup" response time, if any
	SetupP99                     time.Duration // upper bound of the bucket holding its 99th percentile
}

// Elapsed is the run's duration from SIPp's start to its last statistics line.
func (s sippStats) Elapsed() time.Duration { return s.End.Sub(s.Start) }

func (r *sippRun) stats(t testing.TB, dir string) sippStats {
	t.Helper()
	lines := readLines(t, filepath.Join(dir, r.name+".stat.csv"))
	if len(lines) < 2 {
		t.Fatalf("%s: no statistics written; output:\n%s", r.name, tail(r.out.String(), 20))
	}
	head := strings.Split(lines[0], ";")
	last := strings.Split(lines[len(lines)-1], ";")
	col := func(name string) (string, bool) {
		for i, h := range head {
			if h == name && i < len(last) {
				return strings.TrimSpace(last[i]), true
			}
		}
		return "", false
	}
	num := func(name string) int {
		v, ok := col(name)
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("%s: column %s: %q in %s", r.name, name, v, lines[0])
		}
		return n
	}
	// Times are "date<TAB>time<TAB>epoch seconds".
	stamp := func(name string) time.Time {
		v, _ := col(name)
		f := strings.Split(v, "\t")
		sec, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s: column %s: %q", r.name, name, v)
		}
		return time.UnixMicro(int64(sec * 1e6))
	}
	st := sippStats{Created: num("TotalCallCreated"), OK: num("SuccessfulCall(C)"), Failed: num("FailedCall(C)"),
		Retrans: num("Retransmissions(C)"), Start: stamp("StartTime"), End: stamp("CurrentTime")}
	// Response times are "hh:mm:ss:microseconds"; the repartition columns
	// count the responses under each bound in milliseconds.
	if v, ok := col("ResponseTimesetup(C)"); ok {
		var h, m, sec, us int
		if _, err := fmt.Sscanf(v, "%d:%d:%d:%d", &h, &m, &sec, &us); err == nil {
			st.Setup = time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second + time.Duration(us)*time.Microsecond
		}
		total, seen := 0, 0
		type bucket struct {
			bound time.Duration
			n     int
		}
		var bs []bucket
		for i, h := range head {
			b, ok := strings.CutPrefix(h, "ResponseTimeRepartitionsetup_")
			if !ok || i >= len(last) {
				continue
			}
			n, _ := strconv.Atoi(last[i])
			ms, _ := strconv.Atoi(strings.TrimLeft(b, "<>="))
			bound := time.Duration(ms) * time.Millisecond
			if strings.HasPrefix(b, ">=") {
				bound = -1 // unbounded
			}
			bs = append(bs, bucket{bound, n})
			total += n
		}
		for _, b := range bs {
			seen += b.n
			if total > 0 && seen*100 >= total*99 {
				st.SetupP99 = b.bound
				break
			}
		}
	}
	return st
}

// cpuTime is the processor time a process has used so far: user and system
// from /proc/<pid>/stat, in clock ticks of 10ms (USER_HZ on Linux).
func cpuTime(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// cpu is the processor time an exited SIPp used.
func (r *sippRun) cpu() time.Duration {
	<-r.done
	return r.cmd.ProcessState.UserTime() + r.cmd.ProcessState.SystemTime()
}

// rssKB is a process's resident set size (VmRSS) in kB.
func rssKB(t testing.TB, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func percent(part, whole float64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * part / whole
}

// registerUser registers user from local UDP port port (the contact a UAS
// started later on that port receives calls at).
func registerUser(t testing.TB, p *pbxProc, dir, user string, port int) {
	t.Helper()
	r := startSIPp(t, dir, "register-"+user, 30*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "register.xml", "-inf", user+".csv",
		"-m", "1", "-p", strconv.Itoa(port), "-i", "127.0.0.1", "-t", "u1")
	if code := r.wait(); code != 0 {
		t.Fatalf("register %s: sipp exit %d\n%s\npbx log:\n%s", user, code, r.errors(dir), tail(p.log.String(), 30))
	}
}

// BenchmarkSIPpRegister: authenticated REGISTERs (REGISTER, 401, REGISTER with
// digest, 200) per second over UDP, from PBX_BENCH_REG_SIPP SIPp processes
// (default 2) each cycling through its share of PBX_BENCH_REG_ACCOUNTS
// accounts (default 2,000). Each rate of PBX_BENCH_REG_RATES (default
// 6000,10000,14000,18000,22000 registrations per second in all) is offered for
// PBX_BENCH_REG_STEP (default 6s), stopping at the first rate that is not
// sustained: 1% or more failed, or fewer than 90% of the offered
// registrations per second completed. Reports the highest sustained rate,
// what completed at it, its failures and retransmissions, and the CPU the pbx
// and the SIPps used (percent of one core) to show which side limits, and
// the pbx's CPU per registration (pbx_cpu_us/register; a fixed single rate,
// e.g. PBX_BENCH_REG_RATES=6000, makes it comparable between builds); every
// step is logged.
func BenchmarkSIPpRegister(b *testing.B) {
	accounts := benchEnvInt("PBX_BENCH_REG_ACCOUNTS", 2000)
	rates := benchEnvInts("PBX_BENCH_REG_RATES", []int{6000, 10000, 14000, 18000, 22000})
	step := benchEnvDuration("PBX_BENCH_REG_STEP", 6*time.Second)
	procs := benchEnvInt("PBX_BENCH_REG_SIPP", 2)
	docs, users := benchAccounts(accounts)
	p := startPBX(b, pbxConfig{Extra: docs, LogLevel: "info", NoCDR: true})
	pid := p.cmd.Process.Pid

	dir, ports := registerScenario(b, users, procs)

	type result struct {
		rate               int
		done, pbxCPU, sipp float64 // per second; percent of one core
		cpuPerReg          time.Duration
		stats              sippStats
	}
	var best result
	b.ResetTimer()
	for k, rate := range rates {
		if k > 0 {
			time.Sleep(time.Second) // let the previous step's retransmissions end
		}
		cpu0, t0 := cpuTime(b, pid), time.Now()
		runs, offered := startRegisterLoad(b, dir, "reg", p.sipPort, ports, rate, step)
		for _, r := range runs {
			r.wait()
		}
		elapsed := time.Since(t0)
		pbxCPU := cpuTime(b, pid) - cpu0

		var sum sippStats
		var sippCPU time.Duration
		var failures []string
		for i, r := range runs {
			s := r.stats(b, dir)
			sum.Created += s.Created
			sum.OK += s.OK
			sum.Failed += s.Failed
			sum.Retrans += s.Retrans
			if i == 0 || s.Start.Before(sum.Start) {
				sum.Start = s.Start
			}
			if s.End.After(sum.End) {
				sum.End = s.End
			}
			sippCPU += r.cpu()
			if s.Failed > 0 {
				failures = append(failures, r.name+": "+sippFailures(filepath.Join(dir, r.name+".errors.log")))
			}
		}
		// SIPp's own window (first start to last statistics line) leaves out
		// process start-up; the CPU figures use the wall clock around it.
		window := sum.Elapsed()
		res := result{rate: rate, done: float64(sum.OK) / window.Seconds(), stats: sum,
			pbxCPU: percent(pbxCPU.Seconds(), elapsed.Seconds()), sipp: percent(sippCPU.Seconds(), elapsed.Seconds())}
		if sum.OK > 0 {
			res.cpuPerReg = pbxCPU / time.Duration(sum.OK)
		}
		fail := percent(float64(sum.Failed), float64(sum.Created))
		sustained := sum.Created == offered && fail < 1 && res.done >= 0.9*float64(rate)
		b.Logf("offered %d/s from %d SIPp: %d registrations, %d ok, %d failed (%.2f%%), %d retransmissions, %.0f completed/s over %s; pbx cpu %.0f%% (%s per registration), sipp %.0f%%; sustained: %t",
			rate, procs, sum.Created, sum.OK, sum.Failed, fail, sum.Retrans, res.done, window.Round(time.Millisecond), res.pbxCPU, res.cpuPerReg.Round(100*time.Nanosecond), res.sipp, sustained)
		for _, f := range failures {
			b.Logf("  failures %s", f)
		}
		if !sustained {
			break
		}
		best = res
	}
	b.StopTimer()
	if best.rate == 0 {
		b.Fatalf("not even %d registrations per second were sustained; pbx log:\n%s", rates[0], tail(p.log.String(), 30))
	}
	b.ReportMetric(1e9/best.done, "ns/op")
	b.ReportMetric(float64(best.rate), "sustained_offered/s")
	b.ReportMetric(best.done, "registers/s")
	b.ReportMetric(float64(best.stats.Failed), "failed")
	b.ReportMetric(float64(best.stats.Retrans), "retrans")
	b.ReportMetric(best.pbxCPU, "pbx_cpu_%")
	// The whole process's CPU (user and system) per completed registration
	// (REGISTER, 401, REGISTER, 200) at the highest sustained step: what
	// the side-by-side benchmark compares with Kamailio's.
	b.ReportMetric(float64(best.cpuPerReg.Microseconds()), "pbx_cpu_us/register")
	b.ReportMetric(best.sipp, "sipp_cpu_%")
}

// sippFailures summarises a SIPp error log: how often each SIP status was
// the unexpected message, and how many receive timeouts there were.
func sippFailures(path string) string {
	text := readFileString(path)
	counts := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.Contains(l, "receive timeout"):
			counts["receive timeout"]++
		case strings.Contains(l, "Aborting call on unexpected message"), strings.Contains(l, "unexpected message"):
			counts["unexpected message"]++
		}
		if i := strings.Index(l, "received 'SIP/2.0 "); i >= 0 {
			f := strings.Fields(l[i+len("received 'SIP/2.0 "):])
			if len(f) > 0 {
				counts["status "+f[0]]++
			}
		}
	}
	return summarise(counts)
}

// pbxWarnings counts the pbx's warning and error lines by message.
func pbxWarnings(log string) string {
	counts := map[string]int{}
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") {
			continue
		}
		msg := l
		if _, m, ok := strings.Cut(l, "msg="); ok {
			msg = m
			if strings.HasPrefix(m, `"`) {
				if j := strings.Index(m[1:], `"`); j >= 0 {
					msg = m[:j+2]
				}
			} else if f := strings.Fields(m); len(f) > 0 {
				msg = f[0]
			}
		}
		counts[msg]++
	}
	return summarise(counts)
}

func summarise(counts map[string]int) string {
	if len(counts) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	var b strings.Builder
	for i, k := range keys {
		if i == 8 {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s x%d", k, counts[k])
	}
	return b.String()
}

func readFileString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// BenchmarkSIPpCallSetup: call setups per second with anchored media. Bob is
// registered and answered by a SIPp UAS; alice's SIPp places short calls
// (INVITE, 407, INVITE with digest, 180, 200, ACK, PBX_BENCH_CPS_HOLD pause
// (default 100ms), BYE) for PBX_BENCH_CPS_STEP (default 8s) at each rate of
// PBX_BENCH_CPS_RATES (default 300,600,900,1200 calls per second), stopping
// at the first rate that is not sustained: 1% or more failed, or fewer than
// 90% of the offered calls per second completed. Reports the highest
// sustained rate, its failure percentage and the pbx CPU time per call
// (user and system, over the step); every step is logged. It runs
// twice: with call records (as in production: an in-flight marker is
// written and fsynced before the caller hears the answer, the record at the
// end) and without; PBX_BENCH_CPS_CDR=on or off runs one.
func BenchmarkSIPpCallSetup(b *testing.B) {
	for _, records := range []string{"on", "off"} {
		if v := os.Getenv("PBX_BENCH_CPS_CDR"); v != "" && v != records {
			continue
		}
		b.Run("records="+records, func(b *testing.B) { benchCallSetup(b, records == "off") })
	}
}

func benchCallSetup(b *testing.B, noCDR bool) {
	rates := benchEnvInts("PBX_BENCH_CPS_RATES", []int{300, 600, 900, 1200})
	step := benchEnvDuration("PBX_BENCH_CPS_STEP", 8*time.Second)
	hold := benchEnvDuration("PBX_BENCH_CPS_HOLD", 100*time.Millisecond)
	apiPort := freePort(b)
	p := startPBX(b, pbxConfig{LogLevel: "info", RTPMin: benchRTPMin, RTPMax: benchRTPMax, NoCDR: noCDR, APIPort: apiPort})
	pid := p.cmd.Process.Pid
	metrics := fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", apiPort)
	metric := func(prefix string) float64 { return pbxMetric(b, metrics, prefix) }
	dir := scenarioDir(b, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(b)
	registerUser(b, p, dir, "bob", bobPort)
	maxCalls := 0
	for _, r := range rates {
		maxCalls += r * int(step/time.Second+1)
	}
	uas := startSIPpLoad(b, dir, "uas", 30*time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", strconv.Itoa(maxCalls),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(b)), "-t", "u1")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before calls reach it
	uacPort := freePort(b)

	b.ResetTimer()
	best, bestFail, bestDone, bestCPU := 0.0, 0.0, 0.0, 0.0
	var bestStats sippStats
	for i, rate := range rates {
		if i > 0 {
			// Let the previous step's calls end and their ports leave quarantine.
			time.Sleep(6 * time.Second)
		}
		n := rate * int(step/time.Second)
		name := fmt.Sprintf("uac%d", rate)
		logFrom := len(p.log.String())
		cpu0, uasCPU0, t0 := cpuTime(b, pid), cpuTime(b, uas.cmd.Process.Pid), time.Now()
		gc0, wait0 := metric("go_gc_duration_seconds_count"), callWait{}
		if !noCDR {
			wait0 = readCallWait(metric)
		}
		uac := startSIPpLoad(b, dir, name, step+2*time.Minute,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "bench_uac_call.xml", "-inf", "alice.csv",
			"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
			"-r", strconv.Itoa(rate), "-rp", "1000", "-m", strconv.Itoa(n), "-l", strconv.Itoa(rate*10),
			"-d", strconv.Itoa(int(hold/time.Millisecond)), "-recv_timeout", "10000",
			"-p", strconv.Itoa(uacPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(b)), "-t", "u1")
		uac.wait()
		elapsed := time.Since(t0)
		pbxCPU, uasCPU := cpuTime(b, pid)-cpu0, cpuTime(b, uas.cmd.Process.Pid)-uasCPU0
		s := uac.stats(b, dir)
		// Calls are created over n/rate seconds when SIPp and the PBX keep
		// up; the last one ends a hold and a setup later.
		window := s.Elapsed() - hold
		done := float64(s.OK) / window.Seconds()
		fail := percent(float64(s.Failed), float64(s.Created))
		sustained := s.Created == n && fail < 1 && done >= 0.9*float64(rate)
		b.Logf("offered %d/s: %d calls, %d ok, %d failed (%.2f%%), %d retransmissions, %.0f completed/s over %s; setup mean %s, p99 %s; pbx cpu %.0f%% (%.0f us/call), sipp uac %.0f%%, uas %.0f%%; sustained: %t",
			rate, s.Created, s.OK, s.Failed, fail, s.Retrans, done, window.Round(time.Millisecond), s.Setup.Round(10*time.Microsecond), bucketString(s.SetupP99),
			percent(pbxCPU.Seconds(), elapsed.Seconds()), float64(pbxCPU.Microseconds())/float64(max(s.Created, 1)),
			percent(uac.cpu().Seconds(), elapsed.Seconds()), percent(uasCPU.Seconds(), elapsed.Seconds()), sustained)
		// The collections and the heap show what lingering transactions
		// cost (see sipcore.CompletedLinger); the disk wait, the records.
		b.Logf("  %.0f collections, heap in use %.0f MB, %.0f server transactions open",
			metric("go_gc_duration_seconds_count")-gc0, metric("go_memstats_heap_inuse_bytes")/1e6, metric("pbx_sip_transactions_open"))
		if !noCDR {
			b.Logf("  %s", readCallWait(metric).since(wait0))
		}
		if s.Failed > 0 {
			b.Logf("%s failures: %s; pbx warnings: %s", name, sippFailures(filepath.Join(dir, name+".errors.log")), pbxWarnings(p.log.String()[logFrom:]))
		}
		if !sustained {
			break
		}
		best, bestFail, bestDone, bestStats = float64(rate), fail, done, s
		bestCPU = float64(pbxCPU.Microseconds()) / float64(s.Created)
	}
	b.StopTimer()
	b.ReportMetric(best, "sustained_calls/s")
	b.ReportMetric(bestDone, "completed_calls/s")
	b.ReportMetric(bestFail, "fail_%")
	// The pbx's CPU time (user and system) per call offered at that rate:
	// the figure a change to the call path moves first.
	b.ReportMetric(bestCPU, "pbx_cpu_us/call")
	b.ReportMetric(float64(bestStats.Setup.Microseconds())/1000, "setup_mean_ms")
	// The bucket bound under which 99% of the setups (second INVITE to 200)
	// completed; a p99 beyond the last bucket shows as its bound.
	p99 := bestStats.SetupP99
	if p99 < 0 {
		p99 = setupBucketMax
	}
	b.ReportMetric(float64(p99.Milliseconds()), "setup_p99_ms")
	if best > 0 {
		b.ReportMetric(1e9/best, "ns/op")
	}
}

// setupBucketMax is the last bound of bench_uac_call.xml's ResponseTimeRepartition.
const setupBucketMax = 5 * time.Second

func bucketString(d time.Duration) string {
	switch {
	case d < 0:
		return "over " + setupBucketMax.String()
	case d == 0:
		return "-"
	}
	return "under " + d.String()
}

// BenchmarkConcurrentCallsRelay: PBX_BENCH_CALLS calls (default 100) up at
// once for PBX_BENCH_HOLD (default 20s), each with RTP both ways through the
// PBX: the caller's SIPp sends 20ms PCMA packets for the whole hold with
// rtp_stream, from its ordinary UDP media socket (play_pcap_audio's raw
// socket per call would get a copy of every loopback datagram, at the
// PBX's cost; the host's raw sockets are logged), and the callee's SIPp
// echoes them. Reports the resident memory per concurrent call
// (VmRSS of the pbx with every call up minus before the first), the pbx CPU
// while every call is up (in all, and per packet received and sent on), and
// the loss the PBX's "media stats" lines show:
//
//   - in_%: of the packets the caller's SIPp was to send, the share the PBX
//     read on the caller's leg (short when SIPp cannot keep its pace or a
//     socket overflows);
//   - relay_loss_%: of the packets the PBX read on either leg, the share it
//     did not send on to the other: the PBX's own loss;
//   - roundtrip_loss_%: of the packets the caller's SIPp was to send, the
//     share whose echo the PBX did not send back to the caller. It includes
//     the echoing SIPp, whose single echo socket overflows first (from about
//     1,000 calls on two cores).
//
// The SIPps' overload warnings (their watchdog) are logged: with many calls
// the figures then describe the load generator as much as the PBX.
//
// PBX_BENCH_OBSERVE=1 also keeps one event stream (GET /v1/events) open and
// scrapes /v1/metrics once a second for the whole run, as a dashboard and a
// Prometheus would: compare its pbx_cpu_% with a run without.
//
// PBX_BENCH_RECORD=1 records every call (recording mode all): compare its
// pbx_cpu_% and cpu_ns/packet with a run without.
func BenchmarkConcurrentCallsRelay(b *testing.B) {
	n := benchEnvInt("PBX_BENCH_CALLS", 100)
	hold := benchEnvDuration("PBX_BENCH_HOLD", 20*time.Second)
	rate := min(max(n/5, 20), 200) // calls set up per second while ramping
	ramp := time.Duration(n/rate+1) * time.Second
	if hold < ramp+10*time.Second {
		b.Fatalf("PBX_BENCH_HOLD %s is too short for %d calls set up at %d/s: give at least %s", hold, n, rate, ramp+10*time.Second)
	}
	observe := os.Getenv("PBX_BENCH_OBSERVE") == "1"
	cfg := pbxConfig{LogLevel: "info", RTPMin: benchRTPMin, RTPMax: benchRTPMax}
	if observe {
		cfg.APIPort = freePort(b)
	}
	if os.Getenv("PBX_BENCH_RECORD") == "1" {
		cfg.Recording = "  recording:\n    enabled: true\n    mode: all\n"
	}
	p := startPBX(b, cfg)
	pid := p.cmd.Process.Pid
	if observe {
		events, scrapes := observeAPI(b, fmt.Sprintf("http://127.0.0.1:%d", cfg.APIPort))
		defer func() {
			b.Logf("observed: %d event stream bytes read, %d scrapes", events.Load(), scrapes.Load())
		}()
	}
	dir := scenarioDir(b, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	// The caller plays until a second before its BYE, so every packet is sent
	// while the call is up.
	packets := int((hold - time.Second) / (20 * time.Millisecond))
	if err := writeRTPAudio(filepath.Join(dir, "hold.pcma"), packets); err != nil {
		b.Fatal(err)
	}
	bobPort := freePort(b)
	registerUser(b, p, dir, "bob", bobPort)
	uas := startSIPpLoad(b, dir, "uas", hold+ramp+2*time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", strconv.Itoa(n),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(b)), "-rtp_echo", "-t", "u1")
	time.Sleep(300 * time.Millisecond)
	rssBefore := rssKB(b, pid)

	b.ResetTimer()
	uac := startSIPpLoad(b, dir, "uac", hold+ramp+2*time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "bench_uac_hold.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-r", strconv.Itoa(rate), "-m", strconv.Itoa(n), "-l", strconv.Itoa(n), "-d", strconv.Itoa(int(hold/time.Millisecond)),
		"-recv_timeout", "10000", "-p", strconv.Itoa(freePort(b)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(streamMediaPort(b)), "-t", "u1")
	answered := func() int { return countMarkers(p.dataDir) }
	// SIPp itself may set calls up more slowly than asked when it streams
	// hundreds of calls' RTP at once; every call must be up 6s (settling and
	// the measuring window) before the first one ends.
	upWithin := min(2*ramp+20*time.Second, hold-benchEnvDuration("PBX_BENCH_WINDOW", 5*time.Second)-time.Second)
	deadline := time.Now().Add(upWithin)
	for answered() < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d calls up after %s (a longer PBX_BENCH_HOLD leaves more time)\ncaller errors:\n%s\npbx log:\n%s", answered(), n, upWithin,
				tail(readFileString(filepath.Join(dir, "uac.errors.log")), 10), tail(p.log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // let every relay reach its steady state
	cpu0 := cpuTime(b, pid)
	window := benchEnvDuration("PBX_BENCH_WINDOW", 5*time.Second) // CPU is measured over it
	time.Sleep(window)
	pbxCPU := cpuTime(b, pid) - cpu0
	raw := rawSockets()
	rssUp := rssKB(b, pid)
	up := answered()
	if code := uac.wait(); code != 0 {
		s := uac.stats(b, dir)
		b.Logf("caller: sipp exit %d, %d of %d calls failed\n%s", code, s.Failed, s.Created, tail(readFileString(filepath.Join(dir, "uac.errors.log")), 10))
	}
	b.StopTimer()

	// Every call's media stats line, logged when it ends.
	var lines []string
	deadline = time.Now().Add(30 * time.Second)
	for {
		lines = lines[:0]
		for _, l := range strings.Split(p.log.String(), "\n") {
			if strings.Contains(l, "media stats") {
				lines = append(lines, l)
			}
		}
		if len(lines) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(lines) < n {
		b.Errorf("%d media stats lines, want %d", len(lines), n)
	}
	var tot map[string]int64 = map[string]int64{}
	for _, l := range lines {
		for _, f := range strings.Fields(l) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || !strings.Contains(k, "packets_") {
				continue
			}
			x, _ := strconv.ParseInt(v, 10, 64)
			tot[k] += x
		}
	}
	sent := float64(len(lines) * packets)
	in := float64(tot["caller_packets_in"] + tot["callee_packets_in"])
	out := float64(tot["caller_packets_out"] + tot["callee_packets_out"])
	b.ReportMetric(float64(up), "calls_up")
	b.ReportMetric(float64(rssUp-rssBefore)/float64(up), "rss_kB/call")
	b.ReportMetric(percent(pbxCPU.Seconds(), window.Seconds()), "pbx_cpu_%")
	// Each call relays 50 packets a second each way while up.
	b.ReportMetric(float64(pbxCPU.Nanoseconds())/(window.Seconds()*float64(up)*100), "cpu_ns/packet")
	b.ReportMetric(percent(float64(tot["caller_packets_in"]), sent), "in_%")
	b.ReportMetric(percent(in-out, in), "relay_loss_%")
	b.ReportMetric(percent(sent-float64(tot["caller_packets_out"]), sent), "roundtrip_loss_%")
	b.Logf("%d calls up (%d stats lines), hold %s, %d packets per call each way; rss %d kB before, %d kB with the calls up; packets %v; %s while measuring",
		up, len(lines), hold, packets, rssBefore, rssUp, tot, raw)
	for _, r := range []*sippRun{uac, uas} {
		if w := strings.Count(readFileString(filepath.Join(dir, r.name+".errors.log")), "Overload warning"); w > 0 {
			b.Logf("SIPp %s: %d overload warnings (its watchdog found it behind)", r.name, w)
		}
	}
}

// observeAPI keeps an event stream open and scrapes the metrics once a
// second until the benchmark ends, counting what it read.
func observeAPI(b *testing.B, base string) (events, scrapes *atomic.Int64) {
	b.Helper()
	events, scrapes = new(atomic.Int64), new(atomic.Int64)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		return http.DefaultClient.Do(req)
	}
	res, err := get("/v1/events")
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("event stream: %v %v", err, res)
	}
	wg.Go(func() {
		defer res.Body.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := res.Body.Read(buf)
			events.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if r, err := get("/v1/metrics"); err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				scrapes.Add(1)
			}
		}
	})
	return events, scrapes
}

// requireWrk fails (never skips) when wrk is missing, with the command to install it.
func requireWrk(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("wrk")
	if err != nil {
		t.Fatal("wrk is not installed: run `apt-get install wrk` (Debian package wrk)")
	}
	return p
}

// wrkResult is what a wrk --latency run printed.
type wrkResult struct {
	Requests   int
	PerSecond  float64
	P50, P99   time.Duration
	Non2xx     int
	SocketErrs string
}

// runWrk loads url with wrk for d over conns connections and two threads.
func runWrk(t testing.TB, url string, d time.Duration, conns int) wrkResult {
	t.Helper()
	bin := requireWrk(t)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-t", "2", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", int(d/time.Second)),
		"--latency", "-H", "Authorization: Bearer "+testToken, url).CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	var r wrkResult
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "50%":
			r.P50 = parseWrkDuration(t, f[1])
		case len(f) == 2 && f[0] == "99%":
			r.P99 = parseWrkDuration(t, f[1])
		case len(f) >= 2 && f[0] == "Requests/sec:":
			r.PerSecond, _ = strconv.ParseFloat(f[1], 64)
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			r.Requests, _ = strconv.Atoi(f[0])
		case strings.HasPrefix(strings.TrimSpace(l), "Non-2xx or 3xx responses:"):
			r.Non2xx, _ = strconv.Atoi(f[len(f)-1])
		case strings.HasPrefix(strings.TrimSpace(l), "Socket errors:"):
			r.SocketErrs = strings.TrimSpace(l)
		}
	}
	if r.Requests == 0 || r.PerSecond == 0 || r.P99 == 0 {
		t.Fatalf("wrk output not understood:\n%s", out)
	}
	return r
}

// parseWrkDuration reads wrk's latency figures: 812.00us, 1.23ms, 2.01s, 1.50m.
func parseWrkDuration(t testing.TB, s string) time.Duration {
	t.Helper()
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				break
			}
			return time.Duration(f * float64(u.unit))
		}
	}
	t.Fatalf("wrk latency %q not understood", s)
	return 0
}

// benchWrk warms url up, then measures it with wrk for PBX_BENCH_WRK_DURATION
// (default 10s) over PBX_BENCH_WRK_CONNS connections (default 16), and
// reports requests per second, p50 and p99 latency and the pbx's CPU.
func benchWrk(b *testing.B, p *pbxProc, path string) {
	d := benchEnvDuration("PBX_BENCH_WRK_DURATION", 10*time.Second)
	conns := benchEnvInt("PBX_BENCH_WRK_CONNS", 16)
	url := fmt.Sprintf("http://127.0.0.1:%d%s", p.apiPort, path)
	runWrk(b, url, 2*time.Second, conns)
	pid := p.cmd.Process.Pid
	b.ResetTimer()
	cpu0, t0 := cpuTime(b, pid), time.Now()
	r := runWrk(b, url, d, conns)
	elapsed := time.Since(t0)
	pbxCPU := cpuTime(b, pid) - cpu0
	b.StopTimer()
	if r.Non2xx > 0 || r.SocketErrs != "" {
		b.Errorf("%d responses were not 2xx; %s", r.Non2xx, r.SocketErrs)
	}
	b.ReportMetric(1e9/r.PerSecond, "ns/op")
	b.ReportMetric(r.PerSecond, "requests/s")
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99_ms")
	b.ReportMetric(percent(pbxCPU.Seconds(), elapsed.Seconds()), "pbx_cpu_%")
	b.Logf("wrk -t2 -c%d -d%s --latency %s: %d requests", conns, d, url, r.Requests)
}

// BenchmarkAPIStatus: GET /v1/status under wrk (see benchWrk), with the
// token's rate limit raised out of the way.
func BenchmarkAPIStatus(b *testing.B) {
	requireWrk(b)
	p := startPBX(b, pbxConfig{APIPort: freePort(b), APIRate: 1e12, LogLevel: "info", NoCDR: true})
	benchWrk(b, p, "/v1/status")
}

// BenchmarkAPICDRPage: GET /v1/cdr?tenant=demo&limit=100 under wrk (see
// benchWrk) over a year of call history of tenant demo: PBX_BENCH_CDR_CALLS
// calls (default 1,000,000) spread evenly over the 365 days up to now,
// written to the data directory before the PBX starts. Every call has its
// index line; the calls of the newest days also have their record file, as
// startup recovery drops index lines without a record in those days.
func BenchmarkAPICDRPage(b *testing.B) {
	requireWrk(b)
	n := benchEnvInt("PBX_BENCH_CDR_CALLS", 1_000_000)
	dataDir := filepath.Join(b.TempDir(), "data")
	t0 := time.Now()
	if err := writeCallHistory(dataDir, "demo", n, time.Now().Add(-time.Minute)); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %d calls over 365 days in %s", n, time.Since(t0).Round(time.Millisecond))
	p := startPBX(b, pbxConfig{APIPort: freePort(b), APIRate: 1e12, LogLevel: "info", DataDir: dataDir})
	// The page is full and the records are the generated ones, so wrk measures a real page.
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/v1/cdr?tenant=demo&limit=100", p.apiPort), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var page struct {
		Records []struct {
			From string `json:"from"`
		} `json:"records"`
		Next string `json:"next_cursor"`
	}
	err = json.NewDecoder(res.Body).Decode(&page)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || len(page.Records) != 100 || page.Next == "" || !strings.HasPrefix(page.Records[0].From, "+1555") {
		b.Fatalf("first page: status %d, %d records, cursor %q, err %v", res.StatusCode, len(page.Records), page.Next, err)
	}
	benchWrk(b, p, "/v1/cdr?tenant=demo&limit=100")
}

// writeCallHistory writes n calls of tenant spread evenly over the 365 days
// before end, in the layout of appliance/cdr: a day's index.jsonl with one
// line per call, and the record files of the newest days (those recovery
// checks at startup). Day directories follow the local time zone, which the
// PBX under test uses for a tenant without one.
func writeCallHistory(dataDir, tenant string, n int, end time.Time) error {
	store, err := cdr.New(cdr.Options{DataDir: dataDir, Location: func(string) *time.Location { return time.Local }}, nil)
	if err != nil {
		return err
	}
	span := 365 * 24 * time.Hour
	recordsFrom := end.Add(-5 * 24 * time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	var dir string
	var buf []byte
	flush := func() error {
		if dir == "" || len(buf) == 0 {
			return nil
		}
		f, err := os.OpenFile(filepath.Join(dir, cdr.IndexFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return err
		}
		_, err = f.Write(buf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		buf = buf[:0]
		return err
	}
	directions := []calls.Direction{calls.DirectionInbound, calls.DirectionOutbound, calls.DirectionInternal}
	for i := range n {
		start := end.Add(-span + time.Duration(int64(span)/int64(n)*int64(i)))
		r := cdr.NewRecord(tenant, directions[rng.IntN(3)], start)
		r.From = fmt.Sprintf("+1555%07d", rng.IntN(10_000_000))
		r.To = fmt.Sprintf("+1666%07d", rng.IntN(10_000_000))
		r.Extension = strconv.Itoa(100 + rng.IntN(50))
		if r.Direction == calls.DirectionInbound {
			r.DID, r.Trunk = r.To, "carrier-a"
		}
		stop := r.Start.Add(time.Duration(rng.IntN(600_000)) * time.Millisecond)
		if rng.IntN(4) != 0 {
			r.SetAnswer(r.Start.Add(3*time.Second), r.Extension)
			r.Finish(stop.Add(3*time.Second), calls.CauseAnswered, 200, "")
		} else {
			r.Finish(stop, calls.CauseNoAnswer, 487, "")
		}
		r.DurationMS = r.End.Sub(r.Start).Milliseconds()
		path := store.RecordPath(tenant, r.ID, r.Start)
		if d := filepath.Dir(path); d != dir {
			if err := flush(); err != nil {
				return err
			}
			dir = d
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return err
			}
		}
		if !r.Start.Before(recordsFrom) {
			j, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := os.WriteFile(path, j, 0o640); err != nil {
				return err
			}
		}
		buf = r.Entry().AppendLine(buf)
	}
	return flush()
}

// hostBusy is the time every CPU of the host has been busy so far (user,
// system, interrupts and steal from /proc/stat's first line, in USER_HZ
// ticks of 10 ms), for whoever it was: a relay forwarding in the kernel
// does its work in the sending phones' system calls, which its own
// process's CPU does not show.
func hostBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var ticks int64
	for i, v := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is counted in user
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
