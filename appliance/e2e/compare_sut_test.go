package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// The systems BenchmarkCompareKamailio compares: bin/pbx (call records on,
// or off where a figure says so) and
// Kamailio with rtpengine, both on loopback, each started fresh for a phase
// and stopped at its end, so that one's leftovers never weigh on the other.

// sut is one running system under test.
type sut struct {
	name      string
	addr      string // SIP, ip:port on loopback
	sipPIDs   []int  // the processes of the SIP server (every Kamailio process)
	relayPIDs []int  // the media relay's (the pbx itself; rtpengine)
	memPIDs   []int  // every process whose memory the system uses
	// relayRate measures the RTP packets relayed per second over window;
	// nil without media.
	relayRate func(window time.Duration) float64
	// mediaSessions is how many calls the relay holds now; nil without media.
	mediaSessions func() float64
	// metric is the sum of the metric lines that start with a prefix; nil
	// for Kamailio, whose figures the benchmark takes from SIPp.
	metric func(prefix string) float64
	stop   func()
}

// cpu is the processor time pids have used so far.
func cpuOf(t testing.TB, pids []int) time.Duration {
	var d time.Duration
	for _, pid := range pids {
		d += cpuTime(t, pid)
	}
	return d
}

// pssKB is the proportional set size of pids in kB (smaps_rollup): the pages
// shared between Kamailio's processes count once in all, not once per
// process as in their VmRSS.
func pssKB(t testing.TB, pids []int) int64 {
	t.Helper()
	kB, err := readPSS(pids)
	if err != nil {
		t.Fatal(err)
	}
	return kB
}

// readPSS is pssKB for a goroutine that may not fail the benchmark.
func readPSS(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			return 0, fmt.Errorf("memory of %d: %w", pid, err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Pss:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				total += n
				break
			}
		}
	}
	return total, nil
}

// compareAccount is one SIP account both systems know.
type compareAccount struct{ User, Password, Extension string }

// compareDID is a number a trunk call reaches, and the account it rings.
type compareDID struct{ Number, User string }

// compareAccounts are pbxConfig's four named accounts and benchAccounts'
// generated ones, as the PBX is configured with them.
func compareAccounts(users []string) []compareAccount {
	var out []compareAccount
	for i, name := range []string{"alice", "bob", "carol", "dave"} {
		out = append(out, compareAccount{name, name + "-secret", strconv.Itoa(100 + i)})
	}
	for i, u := range users {
		out = append(out, compareAccount{u, u + "-secret", strconv.Itoa(2000 + i)})
	}
	return out
}

// compareTrunkIP is the trusted carrier's address; compareDIDs what it calls.
const compareTrunkIP = "127.0.0.2"

var compareDIDs = []compareDID{{"+15550001", "bob"}}

// startComparePBX starts bin/pbx with call records on or off, the accounts
// of docs, and a carrier trunk trusted by address whose DID rings bob. The
// management API is on for its counters (SIP load shed; with media, RTP).
func startComparePBX(b testing.TB, docs string, media, records bool) *sut {
	extra := docs + fmt.Sprintf(`---
configVersion: pbx/v1
kind: Trunk
metadata: {name: carrier}
spec:
  host: %s
  port: 5060
  inbound: {matchIps: [%[1]s]}
`, compareTrunkIP)
	for _, d := range compareDIDs {
		extra += fmt.Sprintf(`---
configVersion: pbx/v1
kind: InboundRoute
metadata: {name: did-%s, tenant: demo}
spec: {did: "%s", destination: {type: extension, target: "101"}}
`, strings.TrimPrefix(d.Number, "+"), d.Number)
	}
	cfg := pbxConfig{Extra: extra, LogLevel: "info", NoCDR: !records, RTPMin: benchRTPMin, RTPMax: benchRTPMax, APIPort: freePort(b)}
	if os.Getenv("PBX_COMPARE_KERNEL") != "0" {
		// Settled directions forwarded in the kernel, as rtpengine's
		// kernel module would; the table's host CPU per packet counts
		// what the kernel then does in the phones' system calls.
		cfg.Media = "    kernelForwarding: true\n"
	}
	p := startPBX(b, cfg)
	pid := p.cmd.Process.Pid
	name := "pbx"
	if !records {
		name = "pbx-records-off"
	}
	s := &sut{name: name, addr: fmt.Sprintf("127.0.0.1:%d", p.sipPort), sipPIDs: []int{pid}, relayPIDs: []int{pid},
		memPIDs: []int{pid}, stop: p.stop}
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", cfg.APIPort)
	s.metric = func(prefix string) float64 { return pbxMetric(b, url, prefix) }
	if media {
		s.relayRate = func(window time.Duration) float64 {
			n0 := pbxMetric(b, url, `pbx_rtp_packets_total{direction="out"} `)
			time.Sleep(window)
			return (pbxMetric(b, url, `pbx_rtp_packets_total{direction="out"} `) - n0) / window.Seconds()
		}
		s.mediaSessions = func() float64 { return pbxMetric(b, url, "pbx_calls_active{") }
	}
	return s
}

// pbxMetric is the sum of the PBX's metric lines that start with prefix.
func pbxMetric(t testing.TB, url, prefix string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sum, found := 0.0, false
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), prefix) {
			continue
		}
		f := strings.Fields(sc.Text())
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics: %q: %v", sc.Text(), err)
		}
		sum, found = sum+v, true
	}
	if !found {
		t.Fatalf("metrics at %s: no %s", url, prefix)
	}
	return sum
}

// kamailioBins are the reference's programs.
type kamailioBins struct{ kamailio, rtpengine string }

// requireKamailio fails (never skips) when Kamailio or rtpengine is missing,
// with the command that installs them.
func requireKamailio(t testing.TB) kamailioBins {
	t.Helper()
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
			if p := filepath.Join(dir, name); fileExists(p) {
				return p
			}
		}
		t.Fatalf("%s is not installed: run `make bench-compare` (apt-get install kamailio rtpengine-daemon)", name)
		return ""
	}
	return kamailioBins{kamailio: find("kamailio"), rtpengine: find("rtpengine")}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// kamailioConfig is what packaging/bench's templates are filled with.
type kamailioConfig struct {
	IP                    string
	Port, NGPort, CLIPort int
	Children              int
	Secret                string
	TrunkIP               string
	RTPMin, RTPMax        int
	Realtime              bool // rtpengine's threads first-in first-out, as the PBX's relay by default
	Accounts              []compareAccount
	DIDs                  []compareDID
}

// renderBenchTemplate fills packaging/bench/<name>.tmpl into dir/<name>.
func renderBenchTemplate(t testing.TB, dir, name string, data any) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "..", "packaging", "bench", name+".tmpl")
	tmpl, err := template.ParseFiles(src)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// startKamailio starts Kamailio on a free loopback port with the accounts,
// and with media rtpengine first (its threads realtime when realtime),
// both configured from packaging/bench.
func startKamailio(b *testing.B, bins kamailioBins, accounts []compareAccount, media, realtime bool) *sut {
	dir := b.TempDir()
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	c := kamailioConfig{IP: "127.0.0.1", Port: freePort(b), NGPort: freePort(b), CLIPort: freePort(b),
		Children: benchEnvInt("PBX_COMPARE_KAMAILIO_CHILDREN", 8), Secret: hex.EncodeToString(secret), TrunkIP: compareTrunkIP,
		RTPMin: benchRTPMin, RTPMax: benchRTPMax, Realtime: realtime, Accounts: accounts, DIDs: compareDIDs}
	s := &sut{name: "kamailio", addr: fmt.Sprintf("%s:%d", c.IP, c.Port)}
	if realtime {
		s.name = "kamailio, rtpengine realtime"
	}
	var daemons []*daemon
	s.stop = func() {
		for i := len(daemons) - 1; i >= 0; i-- {
			daemons[i].stop()
		}
	}
	if media {
		rtp := startDaemon(b, dir, "rtpengine", bins.rtpengine, "--config-file="+renderBenchTemplate(b, dir, "rtpengine.conf", c))
		daemons = append(daemons, rtp)
		waitReady(b, rtp, func() bool { return ngPing(fmt.Sprintf("%s:%d", c.IP, c.NGPort)) })
		s.relayPIDs = []int{rtp.cmd.Process.Pid}
		cli := fmt.Sprintf("%s:%d", c.IP, c.CLIPort)
		s.relayRate = func(window time.Duration) float64 { return rtpengineRate(b, cli, window) }
		s.mediaSessions = func() float64 { return rtpengineTotal(b, cli, "Total sessions") }
	}
	cfg := renderBenchTemplate(b, dir, "kamailio.cfg", c)
	shm := strconv.Itoa(benchEnvInt("PBX_COMPARE_KAMAILIO_SHM_MB", 512))
	kam := startDaemon(b, dir, "kamailio", bins.kamailio, "-DD", "-E", "-f", cfg, "-m", shm, "-M", "16", "-Y", dir, "-w", dir)
	daemons = append(daemons, kam)
	waitReady(b, kam, func() bool { return sipAnswers(s.addr) })
	s.sipPIDs = append([]int{kam.cmd.Process.Pid}, childPIDs(kam.cmd.Process.Pid)...)
	s.memPIDs = append(append([]int{}, s.sipPIDs...), s.relayPIDs...)
	return s
}

// daemon is a reference process started for one phase, in its own process
// group so that whatever it forked goes with it.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{}
}

func startDaemon(b *testing.B, dir, name, bin string, args ...string) *daemon {
	b.Helper()
	d := &daemon{name: name, cmd: exec.Command(bin, args...), log: &logBuffer{}, done: make(chan struct{})}
	d.cmd.Dir = dir
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.done)
	}()
	b.Cleanup(d.stop)
	return d
}

// stop sends SIGTERM and, if the process has not exited within 10s, kills
// its process group.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
	// Kamailio's children end with it; make sure none outlives the phase.
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
}

// waitReady polls ready until it holds, failing if d exits or 15s pass.
func waitReady(b *testing.B, d *daemon, ready func() bool) {
	b.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ready() {
		select {
		case <-d.done:
			b.Fatalf("%s exited at start; output:\n%s", d.name, tail(d.log.String(), 30))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready within 15s; output:\n%s", d.name, tail(d.log.String(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sipAnswers sends one OPTIONS to addr and reports whether any response came.
func sipAnswers(addr string) bool {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	local := c.LocalAddr().String()
	msg := fmt.Sprintf("OPTIONS sip:%[1]s SIP/2.0\r\nVia: SIP/2.0/UDP %[2]s;branch=z9hG4bK-probe%[3]d;rport\r\n"+
		"From: <sip:probe@%[2]s>;tag=p%[3]d\r\nTo: <sip:%[1]s>\r\nCall-ID: probe-%[3]d@%[2]s\r\nCSeq: 1 OPTIONS\r\n"+
		"Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n", addr, local, time.Now().UnixNano())
	if _, err := c.Write([]byte(msg)); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	return err == nil && bytes.HasPrefix(buf[:n], []byte("SIP/2.0 "))
}

// ngPing sends rtpengine's ng "ping" to addr and reports whether it ponged.
func ngPing(addr string) bool {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	if _, err := c.Write([]byte("probe d7:command4:pinge")); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	return err == nil && bytes.Contains(buf[:n], []byte("4:pong"))
}

// rtpengineRate is the mean of rtpengine's own userspace packets-per-second
// figure (its CLI's "list totals"), sampled each second over window.
func rtpengineRate(t testing.TB, cli string, window time.Duration) float64 {
	t.Helper()
	var sum float64
	n := max(int(window/time.Second), 1)
	tick := time.NewTicker(window / time.Duration(n))
	defer tick.Stop()
	for range n {
		<-tick.C
		sum += rtpengineTotal(t, cli, "Packets per second (userspace)")
	}
	return sum / float64(n)
}

// rtpengineTotal reads one figure of rtpengine's "list totals".
func rtpengineTotal(t testing.TB, cli, name string) float64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", cli, 2*time.Second)
	if err != nil {
		t.Fatalf("rtpengine cli: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("list totals\n")); err != nil {
		t.Fatalf("rtpengine cli: %v", err)
	}
	out, _ := io.ReadAll(c)
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == name {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	t.Fatalf("rtpengine cli: no %q in:\n%s", name, out)
	return 0
}

// childPIDs are the processes whose parent is pid.
func childPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
