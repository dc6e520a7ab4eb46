package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkSIPpRegisterMemory: the memory bin/pbx returns after a REGISTER
// load, the issue's "within 20% of its idle size within 30 s after the load
// ends". Authenticated REGISTERs over UDP from PBX_BENCH_REGMEM_SIPP SIPp
// processes (default 2) cycling through PBX_BENCH_REGMEM_ACCOUNTS accounts
// (default 2,000) at each rate of PBX_BENCH_REGMEM_RATES (default 8000,12000
// per second in all) for PBX_BENCH_REGMEM_STEP each (default 10s); then the
// process's proportional set size is sampled every second for
// PBX_BENCH_REGMEM_AFTER (default 30s). Reports idle_MB (after start),
// peak_MB (during the load), after_MB (at the end of the wait), after/idle
// (the target is at most 1.2), back_s (when memory was first within 20%
// of idle; -1 when never) and the pbx's CPU per completed registration
// during the load. With PBX_PPROF set (passed on to the pbx) each
// sample's log line also carries the Go runtime's memory classes.
func BenchmarkSIPpRegisterMemory(b *testing.B) {
	accounts := benchEnvInt("PBX_BENCH_REGMEM_ACCOUNTS", 2000)
	rates := benchEnvInts("PBX_BENCH_REGMEM_RATES", []int{8000, 12000})
	step := benchEnvDuration("PBX_BENCH_REGMEM_STEP", 10*time.Second)
	wait := benchEnvDuration("PBX_BENCH_REGMEM_AFTER", 30*time.Second)
	procs := benchEnvInt("PBX_BENCH_REGMEM_SIPP", 2)
	docs, users := benchAccounts(accounts)
	p := startPBX(b, pbxConfig{Extra: docs, LogLevel: "info", NoCDR: true})
	pids := []int{p.cmd.Process.Pid}

	dir, ports := registerScenario(b, users, procs)

	b.ResetTimer()
	var m regMemory
	m.idle = pssKB(b, pids)
	b.Logf("idle: pss %d kB %s %s", m.idle, pssParts(pids[0]), goMemory())
	watch := watchMemory(pids, 250*time.Millisecond)
	cpu0 := cpuTime(b, pids[0])
	var ok, failed int
	for _, rate := range rates {
		runs, _ := startRegisterLoad(b, dir, "regmem", p.sipPort, ports, rate, step)
		for _, r := range runs {
			r.wait()
			s := r.stats(b, dir)
			ok += s.OK
			failed += s.Failed
		}
	}
	cpu := cpuTime(b, pids[0]) - cpu0
	m.peak = watch.end()
	m.end = pssKB(b, pids)
	b.Logf("load over: %d ok, %d failed; pss peak %d kB, now %d kB %s", ok, failed, m.peak, m.end, goMemory())
	start := time.Now()
	m.wait, m.back = wait, -1
	for {
		kB := pssKB(b, pids)
		elapsed := time.Since(start)
		if m.back < 0 && float64(kB) <= 1.2*float64(m.idle) {
			m.back = elapsed
		}
		b.Logf("+%2.0fs pss %6d kB rss %6d kB %s %s", elapsed.Seconds(), kB, rssKB(b, pids[0]), pssParts(pids[0]), goMemory())
		if elapsed >= wait {
			m.after = kB
			break
		}
		time.Sleep(min(time.Second, wait-elapsed))
	}
	b.StopTimer()
	if ok == 0 {
		b.Fatalf("no registration completed; pbx log:\n%s", tail(p.log.String(), 30))
	}
	b.ReportMetric(float64(m.idle)/1024, "idle_MB")
	b.ReportMetric(float64(m.peak)/1024, "peak_MB")
	b.ReportMetric(float64(m.after)/1024, "after_MB")
	b.ReportMetric(float64(m.after)/float64(m.idle), "after/idle")
	back := -1.0
	if m.back >= 0 {
		back = m.back.Seconds()
	}
	b.ReportMetric(back, "back_s")
	b.ReportMetric(float64(ok), "registrations")
	b.ReportMetric(float64(failed), "failed")
	// The CPU the load cost, so that a memory setting that trades CPU for
	// a lower peak (a soft memory limit, a lower GOGC) shows its price.
	b.ReportMetric(float64(cpu.Microseconds())/float64(ok), "pbx_cpu_us/register")
}

// pssParts is a process's anonymous and file-backed proportional set sizes
// (smaps_rollup's Pss_Anon and Pss_File), to tell the Go heap's pages
// from the binary's.
func pssParts(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return ""
	}
	var parts []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "Pss_Anon:") || strings.HasPrefix(l, "Pss_File:") || strings.HasPrefix(l, "AnonHugePages:") {
			parts = append(parts, strings.Join(strings.Fields(l), ""))
		}
	}
	return strings.Join(parts, " ")
}

// goMemory is the pbx's Go memory classes in MB (runtime/metrics
// /memory/classes/..., served at PBX_PPROF's /debug/memory), the ones that
// are not zero; empty when PBX_PPROF is not set.
func goMemory() string {
	addr := os.Getenv("PBX_PPROF")
	if addr == "" {
		return ""
	}
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + addr + "/debug/memory")
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return ""
	}
	body, _ := io.ReadAll(res.Body)
	var sb strings.Builder
	for _, l := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(l, " ")
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil || n == 0 {
			continue
		}
		name = strings.TrimPrefix(strings.TrimPrefix(name, "/memory/classes/"), "/gc/")
		name, unit, _ := strings.Cut(name, ":")
		if unit == "bytes" {
			fmt.Fprintf(&sb, " %s=%.1f", name, float64(n)/(1<<20))
		} else {
			fmt.Fprintf(&sb, " %s=%d", name, n)
		}
	}
	return strings.TrimSpace(sb.String())
}
