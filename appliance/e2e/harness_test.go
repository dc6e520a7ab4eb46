package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	code := func() int {
		binDir = os.Getenv("PBX_BIN")
		if binDir == "" {
			dir, err := os.MkdirTemp("", "pbx-e2e-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			for _, name := range []string{"pbx", "pbxctl"} {
				cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "pbx/cmd/"+name)
				cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
				if err := cmd.Run(); err != nil {
					fmt.Fprintln(os.Stderr, "build", name+":", err)
					return 1
				}
			}
			binDir = dir
		}
		return m.Run()
	}()
	os.Exit(code)
}

// requireSIPp fails (never skips) when SIPp is missing, with the command to install it.
func requireSIPp(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("sipp")
	if err != nil {
		t.Fatal("sipp is not installed: run `make test-deps` (apt-get install sip-tester)")
	}
	return p
}

// Test ports come from above the kernel's ephemeral range (32768-60999 by
// default), so that no client socket of another process running in parallel can
// take a port between the moment it is chosen and the moment SIPp or the PBX binds it.
const (
	testPortMin = 61000
	testPortMax = 65500
)

var nextPort atomic.Int32

func init() {
	nextPort.Store(int32(testPortMin + (os.Getpid()%45)*100))
}

// portSlot is how many ports each freePort hands out: the port it returns
// and the three above it, which SIPp binds when given the port as its media
// port (-mp: audio, its RTCP, video and its RTCP), so that no later
// freePort of the same process returns one of them while SIPp holds it.
const portSlot = 4

// freePort returns a port free for both UDP and TCP on 127.0.0.1, with the
// three UDP ports above it free too (see portSlot).
func freePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < (testPortMax-testPortMin)/portSlot; i++ {
		port := int(nextPort.Add(portSlot))
		if port+portSlot > testPortMax {
			nextPort.CompareAndSwap(int32(port), testPortMin)
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		free := udpFree(port, portSlot)
		l.Close()
		if free {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// portBlock is how many ports freePortRange reserves at a time.
const portBlock = 100

// freePortRange finds n consecutive free UDP ports (for RTP ranges and a
// softphone's ports), from a multiple of portBlock (even), and reserves them
// until the test ends: a lock file per block under $TMPDIR/pbx-e2e-ports,
// held with flock, keeps every other process of this harness (another
// package's tests, another checkout's) from handing out the same ports. A
// probe alone could not: the PBX and the phones bind their RTP ports only
// when a call starts, long after the probe.
func freePortRange(t testing.TB, n int) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768 and up), where other processes'
	// client sockets do not land, and above rtpcore's default range.
	const lo, hi = 21000, 32700
	dir := filepath.Join(os.TempDir(), "pbx-e2e-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	span := (hi - lo) / portBlock
	for i := range span {
		base := lo + (os.Getpid()+i)%span*portBlock
		if base+n > hi {
			continue
		}
		locks := lockPortBlocks(dir, base, (n+portBlock-1)/portBlock)
		if locks == nil {
			continue
		}
		if udpFree(base, n) {
			t.Cleanup(func() { closeAll(locks) })
			return base
		}
		closeAll(locks)
	}
	t.Fatal("no free port range")
	return 0
}

// lockPortBlocks takes the lock files of blocks blocks from base, or none
// (nil) when another process holds one of them.
func lockPortBlocks(dir string, base, blocks int) []*os.File {
	var held []*os.File
	for b := range blocks {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(base+b*portBlock)), os.O_CREATE|os.O_RDWR, 0o666)
		if err == nil {
			if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				f.Close()
			}
		}
		if err != nil {
			closeAll(held)
			return nil
		}
		held = append(held, f)
	}
	return held
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// udpFree reports whether UDP ports base..base+n-1 of 127.0.0.1 can be bound.
func udpFree(base, n int) bool {
	var held []net.PacketConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for p := base; p < base+n; p++ {
		c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		held = append(held, c)
	}
	return true
}

// logBuffer collects a process's output and lets tests wait for a line.
type logBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	from int
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// mark starts a new run: Since returns only what was written after it.
func (l *logBuffer) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.from = l.buf.Len()
}

// Since is the output of the current run.
func (l *logBuffer) Since() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf.Bytes()[l.from:])
}

// logWait is how long Contains and ContainsSince wait for a line: the
// daemon writes its log in batches (logging.Coalescer, every 5 ms), so a
// line may reach the buffer a little after the action that logged it.
const logWait = 2 * time.Second

// Contains reports whether the whole output has substr, waiting up to
// logWait for it to arrive.
func (l *logBuffer) Contains(substr string) bool {
	return eventuallyContains(l.String, substr)
}

// ContainsSince is Contains for the output of the current run.
func (l *logBuffer) ContainsSince(substr string) bool {
	return eventuallyContains(l.Since, substr)
}

func eventuallyContains(read func() string, substr string) bool {
	deadline := time.Now().Add(logWait)
	for {
		if strings.Contains(read(), substr) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pbxProc is a running bin/pbx.
type pbxProc struct {
	t       testing.TB
	cmd     *exec.Cmd
	dir     string // configuration root
	dataDir string
	sipPort int
	apiPort int
	log     *logBuffer
	done    chan struct{}
	exitErr error
	level   string // --log-level; empty: debug
	nofile  uint64 // the open file limit it starts with (prlimit); zero: inherited
}

// pbxConfig is what a test varies in the System document.
type pbxConfig struct {
	SIPPort  int
	APIPort  int // zero: API off
	RTPMin   int
	Extra    string // further documents, appended as is
	NoCDR    bool
	DataDir  string
	APIToken string
	RTPMax   int     // zero: RTPMin+799
	APIRate  float64 // api.rateLimit requests per minute and burst; zero: the defaults
	LogLevel string  // zero: debug
	// SIP is further keys of the System's sip block, indented under it
	// ("    digestAlgorithms: [md5]\n", "    tcp:\n      maxPerSource: 4\n"); empty: none.
	SIP string
	// Security is the System's security block as YAML indented under spec
	// ("  security:\n    enabled: true\n"); empty: none (the guard is off).
	Security string
	// Recording is the System's recording block as YAML indented under
	// spec ("  recording:\n    enabled: true\n"); empty: none.
	Recording string
	// MOH is the System's moh block as YAML indented under spec
	// ("  moh:\n    default: /abs/music.wav\n"); empty: none.
	MOH string
	// Tokens are further API tokens, list items indented under api.tokens
	// ("      - name: acme\n        token: ...\n"); empty: only testToken.
	Tokens string
	// Demo is further keys of the demo tenant's spec, indented under it
	// ("  mailboxes:\n    - extension: \"101\"\n"); empty: none.
	Demo string
	// Media is further keys of the System's media block, indented under
	// it ("    kernelForwarding: true\n"); empty: none.
	Media string
	// NoFile is the open file limit (soft and hard) the process starts
	// with, set by prlimit(1); zero: the test's own.
	NoFile uint64
}

const testToken = "e2e-test-token-0123456789abcdefghij"

func (c pbxConfig) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, `configVersion: pbx/v1
kind: System
spec:
  sip:
    bindHost: 127.0.0.1
    bindPort: %d
    transports: [udp, tcp]
%s  media:
    rtpPortMin: %d
    rtpPortMax: %d
%s  dataDir: %s
  cdr:
    enabled: %t
`, c.SIPPort, c.SIP, c.RTPMin, c.rtpMax(), c.Media, c.DataDir, !c.NoCDR)
	if c.APIPort != 0 {
		fmt.Fprintf(&b, `  api:
    enabled: true
    bindHost: 127.0.0.1
    bindPort: %d
    tokens:
      - name: e2e
        token: %s
        scopes: [status:read, cdr:read, security:read, operate]
%s`, c.APIPort, testToken, c.Tokens)
		if c.APIRate != 0 {
			fmt.Fprintf(&b, `    rateLimit:
      requestsPerMinute: %s
      burst: %[1]s
`, strconv.FormatFloat(c.APIRate, 'f', -1, 64))
		}
	}
	b.WriteString(c.Security)
	b.WriteString(c.Recording)
	b.WriteString(c.MOH)
	b.WriteString(`---
configVersion: pbx/v1
kind: Tenant
metadata: {name: demo}
spec:
  domain: 127.0.0.1
`)
	b.WriteString(c.Demo)
	for i, name := range []string{"alice", "bob", "carol", "dave"} {
		fmt.Fprintf(&b, `---
configVersion: pbx/v1
kind: Account
metadata: {name: %s, tenant: demo}
spec:
  password: %s-secret
  extension: "%d"
  displayName: %s
`, name, name, 100+i, strings.ToUpper(name[:1])+name[1:])
	}
	b.WriteString(c.Extra)
	return b.String()
}

func (c pbxConfig) rtpMax() int {
	if c.RTPMax != 0 {
		return c.RTPMax
	}
	return c.RTPMin + 799
}

// startPBX writes the configuration into a fresh directory and starts bin/pbx on it,
// returning once every listener is bound.
func startPBX(t testing.TB, c pbxConfig) *pbxProc {
	t.Helper()
	root := t.TempDir()
	if c.SIPPort == 0 {
		c.SIPPort = freePort(t)
	}
	if c.RTPMin == 0 {
		c.RTPMin = freePortRange(t, 800)
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join(root, "data")
	}
	if err := os.WriteFile(filepath.Join(root, "pbx.yaml"), []byte(c.yaml()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &pbxProc{t: t, dir: root, dataDir: c.DataDir, sipPort: c.SIPPort, apiPort: c.APIPort, log: &logBuffer{}, done: make(chan struct{}), level: c.LogLevel, nofile: c.NoFile}
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("pbx log (last lines, debug omitted):\n%s", tail(withoutDebug(p.log.String()), 60))
		}
	})
	return p
}

func (p *pbxProc) start() {
	p.t.Helper()
	p.done = make(chan struct{})
	p.log.mark()
	level := p.level
	if level == "" {
		level = "debug"
	}
	args := []string{filepath.Join(binDir, "pbx"), "run", "--config", p.dir, "--log-level", level, "--drain-timeout", "5s"}
	if p.nofile > 0 {
		args = append([]string{"prlimit", fmt.Sprintf("--nofile=%d", p.nofile), "--"}, args...) // execs the pbx: same pid
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	p.waitLog("sip listener ready", 15*time.Second)
	if p.apiPort != 0 {
		p.waitLog("api listening", 15*time.Second)
	}
}

// stop sends SIGTERM and waits; the process must exit by itself.
func (p *pbxProc) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("pbx did not stop within 20s of SIGTERM; log:\n%s", tail(p.log.String(), 40))
	}
}

// kill ends the process with SIGKILL, as a crash would.
func (p *pbxProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *pbxProc) waitLog(substr string, d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.log.Since(), substr) {
			return
		}
		select {
		case <-p.done:
			p.t.Fatalf("pbx exited (%v) before logging %q; log:\n%s", p.exitErr, substr, tail(p.log.String(), 40))
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("pbx did not log %q within %s; log:\n%s", substr, d, tail(p.log.String(), 40))
}

func withoutDebug(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "level=DEBUG") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sippRun is one SIPp process.
type sippRun struct {
	name string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{}
	code int
}

// scenarioDir copies the scenarios, a generated RTP capture and the given
// injection files into a fresh working directory for SIPp.
func scenarioDir(t testing.TB, csv map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "testdata")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeRTPCapture(filepath.Join(dir, "audio.pcap"), 150); err != nil {
		t.Fatal(err)
	}
	for name, body := range csv {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startSIPp starts SIPp in dir with args, tracing errors and every message;
// the run is bounded by timeout.
func startSIPp(t testing.TB, dir, name string, timeout time.Duration, args ...string) *sippRun {
	t.Helper()
	return launchSIPp(t, dir, name, timeout, true, args...)
}

// launchSIPp starts SIPp; traceMessages adds -trace_msg (too costly under load).
func launchSIPp(t testing.TB, dir, name string, timeout time.Duration, traceMessages bool, args ...string) *sippRun {
	t.Helper()
	bin := requireSIPp(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	args = append(args, "-nostdin", "-trace_err", "-error_file", filepath.Join(dir, name+".errors.log"))
	if traceMessages {
		args = append(args, "-trace_msg", "-message_file", filepath.Join(dir, name+".messages.log"))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	r := &sippRun{name: name, cmd: cmd, out: &logBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		err := cmd.Wait()
		r.code = cmd.ProcessState.ExitCode()
		if err != nil && r.code == 0 {
			r.code = -1
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait returns SIPp's exit code (0: every call succeeded).
func (r *sippRun) wait() int {
	<-r.done
	return r.code
}

func (r *sippRun) errors(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, r.name+".errors.log"))
	m, _ := os.ReadFile(filepath.Join(dir, r.name+".messages.log"))
	return tail(string(b), 30) + "\n--- messages ---\n" + tail(string(m), 150)
}

// writeRTPCapture writes a pcap of n RTP packets (PCMA, 20 ms apart) for SIPp's
// play_pcap_audio, which rewrites the addresses to the negotiated ones.
func writeRTPCapture(path string, n int) error {
	return writeRTPCaptureOf(path, n, 0x5eed1234, func(i, j int) byte { return byte(0xd5 ^ (i*7 + j)) })
}

// writeRTPCaptureOf writes a pcap of n PCMA packets of stream ssrc, 20 ms
// apart; byte j (12..171, after the RTP header) of packet i is payload(i, j).
func writeRTPCaptureOf(path string, n int, ssrc uint32, payload func(i, j int) byte) error {
	return writeCaptureWithDigits(path, n, ssrc, payload, nil)
}

// readLines reads a file's lines.
func readLines(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
