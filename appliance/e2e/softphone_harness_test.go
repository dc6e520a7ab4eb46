package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The softphone harness drives stock Debian softphones, unmodified, through
// their own command interfaces: baresip through its ctrl_tcp module (netstring
// JSON commands and events), linphonec through its stdin prompt. Neither has a
// sound card here: baresip plays a WAV with the aufile module, discards what it
// hears into aubridge and dumps both directions to WAV files with the sndfile
// filter; linphonec runs with "soundcard use files", playing and recording WAV
// files.

// stepTimeout bounds one step of a softphone scenario (a registration, a
// call's ringing, an answer).
const stepTimeout = 5 * time.Second

// requireSoftphone fails (never skips) when the softphone cmd is missing, with
// the command to install it.
func requireSoftphone(t testing.TB, cmd, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(cmd)
	if err != nil {
		t.Fatalf("%s is not installed: run `make test-deps` (apt-get install %s)", cmd, pkg)
	}
	return p
}

// phoneProc is a softphone process with its output collected.
type phoneProc struct {
	name string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{}
}

// startPhoneProc starts bin with args in a private HOME under dir, and stops
// it when the test ends.
func startPhoneProc(t testing.TB, name, dir string, stdin io.Reader, bin string, args ...string) *phoneProc {
	t.Helper()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".local", "share", "linphone"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"), "DISPLAY=", "PULSE_SERVER=none")
	p := &phoneProc{name: name, cmd: cmd, out: &logBuffer{}, done: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(3 * time.Second)
		if t.Failed() {
			t.Logf("%s output (last lines):\n%s", name, tail(p.out.String(), 40))
		}
	})
	return p
}

// stop asks the process to end (SIGTERM), killing it after grace.
func (p *phoneProc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *phoneProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// softphonePorts are the ports of one test's PBX and phones: the PBX's RTP
// range and, above it, a block the phones take their SIP, control and RTP
// ports from. Both are reserved for the test (freePortRange), so no other
// test process hands them out while a phone has not bound them yet.
type softphonePorts struct {
	rtpMin, rtpMax int // the PBX's
	next, end      int // the phones' ports left: next..end-1
}

func newSoftphonePorts(t testing.TB) *softphonePorts {
	base := freePortRange(t, 1000)
	return &softphonePorts{rtpMin: base, rtpMax: base + 799, next: base + 800, end: base + 1000}
}

// take returns the first of n consecutive ports for a phone.
func (s *softphonePorts) take(t testing.TB, n int) int {
	t.Helper()
	if s.next+n > s.end {
		t.Fatalf("the phones' %d ports are all taken", s.end-s.rtpMax-1)
	}
	p := s.next
	s.next += n
	return p
}

// --- baresip -----------------------------------------------------------------

// baresip is a running baresip with a ctrl_tcp connection.
type baresip struct {
	proc   *phoneProc
	dir    string
	recDir string // sndfile's dumps: <stamp>-enc.wav (sent) and -dec.wav (heard)
	conn   net.Conn

	mu     sync.Mutex
	events []map[string]any
	resp   map[string]map[string]any
	seq    int
	cursor int // events before this were consumed by waitEvent
}

// baresipMWI loads baresip's mwi module, which subscribes to its account's
// message-summary once registered (RFC 3842).
//
// Baresip 1.0's mwi module has a timer, armed for 1 ms when the module is
// loaded, that walks its list of subscriptions and subscribes again for
// each one, appending to the list it walks: if the account's first
// registration succeeded before that timer ran, the walk never ends and
// baresip sends SUBSCRIBEs in a tight loop, never serving its control
// socket again. So with this feature the account is not in the accounts
// file: it is created with the "uanew" command once the control socket
// answers (the timer has run by then, over an empty list), and registers
// from there.
const baresipMWI = "mwi"

// startBaresip starts baresip registered as user (password user-secret) at
// the PBX on UDP, sending tone (a WAV file) as its microphone; features
// (baresipMWI) turn further modules on.
func startBaresip(t testing.TB, pbx *pbxProc, ports *softphonePorts, user, tone string, features ...string) *baresip {
	t.Helper()
	mwi := slices.Contains(features, baresipMWI)
	mwiModule, mwiParam := "", ""
	if mwi {
		mwiModule, mwiParam = "module_app\tmwi.so\n", ";mwi=yes"
	}
	bin := requireSoftphone(t, "baresip", "baresip")
	dir := t.TempDir()
	b := &baresip{dir: dir, recDir: filepath.Join(dir, "rec"), resp: map[string]map[string]any{}}
	if err := os.MkdirAll(b.recDir, 0o755); err != nil {
		t.Fatal(err)
	}
	modules := baresipModules(t)
	// baresip binds SIP on sipPort (UDP and TCP) and TLS on the port above.
	sipPort, ctrlPort, rtp := ports.take(t, 2), ports.take(t, 1), ports.take(t, 20)
	config := fmt.Sprintf(`poll_method	epoll
sip_listen	127.0.0.1:%d
call_local_timeout	30
audio_player	aubridge,nil
audio_alert	aubridge,nil
audio_source	aufile,%s
rtp_ports	%d-%d
rtp_timeout	0
module_path	%s
module	g711.so
module	aubridge.so
module	aufile.so
module	sndfile.so
module_tmp	account.so
module_app	menu.so
module_app	ctrl_tcp.so
%sctrl_tcp_listen	127.0.0.1:%d
snd_path	%s
`, sipPort, tone, rtp, rtp+19, modules, mwiModule, ctrlPort, b.recDir)
	accounts := fmt.Sprintf("<sip:%s@127.0.0.1;transport=udp>;auth_pass=%s-secret;outbound=\"sip:127.0.0.1:%d;transport=udp\";regint=300%s;answermode=manual;audio_codecs=pcma,pcmu\n",
		user, user, pbx.sipPort, mwiParam)
	files := map[string]string{"config": config, "accounts": accounts, "contacts": ""}
	if mwi {
		files["accounts"] = ""
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.proc = startPhoneProc(t, "baresip "+user, dir, nil, bin, "-f", dir)
	deadline := time.Now().Add(stepTimeout)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ctrlPort))
		if err == nil {
			b.conn = c
			break
		}
		if time.Now().After(deadline) || b.proc.exited() {
			t.Fatalf("baresip ctrl_tcp on port %d: %v\n%s", ctrlPort, err, tail(b.proc.out.String(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { b.conn.Close() })
	go b.read()
	if mwi {
		b.command(t, "uanew", strings.TrimSuffix(accounts, "\n"))
	}
	return b
}

// baresipModules finds the directory of baresip's modules (Debian's, or a
// multiarch or local build's).
func baresipModules(t testing.TB) string {
	t.Helper()
	dirs := []string{"/usr/lib/baresip/modules", "/usr/local/lib/baresip/modules"}
	multiarch, _ := filepath.Glob("/usr/lib/*/baresip/modules")
	for _, d := range append(dirs, multiarch...) {
		if _, err := os.Stat(filepath.Join(d, "ctrl_tcp.so")); err == nil {
			return d
		}
	}
	t.Fatalf("baresip's modules (ctrl_tcp.so) not found in %v: run `make test-deps` (apt-get install baresip)", append(dirs, multiarch...))
	return ""
}

// read parses ctrl_tcp's netstrings: responses (matched by token) and events.
func (b *baresip) read() {
	r := bufio.NewReader(b.conn)
	for {
		lenText, err := r.ReadString(':')
		if err != nil {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(lenText[:len(lenText)-1]))
		if err != nil || n < 0 || n > 1<<20 {
			return
		}
		msg := make([]byte, n+1) // the payload and its trailing comma
		if _, err := io.ReadFull(r, msg); err != nil {
			return
		}
		var m map[string]any
		if json.Unmarshal(msg[:n], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m["response"] == true {
			tok, _ := m["token"].(string)
			b.resp[tok] = m
		} else if m["event"] == true {
			b.events = append(b.events, m)
		}
		b.mu.Unlock()
	}
}

// command runs a ctrl_tcp command and fails t unless it succeeds.
func (b *baresip) command(t testing.TB, cmd, params string) string {
	t.Helper()
	b.mu.Lock()
	b.seq++
	tok := "t" + strconv.Itoa(b.seq)
	b.mu.Unlock()
	msg, _ := json.Marshal(map[string]string{"command": cmd, "params": params, "token": tok})
	if _, err := fmt.Fprintf(b.conn, "%d:%s,", len(msg), msg); err != nil {
		t.Fatalf("baresip %s: %v", cmd, err)
	}
	deadline := time.Now().Add(stepTimeout)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		m, ok := b.resp[tok]
		b.mu.Unlock()
		if ok {
			if m["ok"] != true {
				t.Fatalf("baresip %s %s: %v", cmd, params, m)
			}
			s, _ := m["data"].(string)
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("baresip %s %s: no response within %s", cmd, params, stepTimeout)
	return ""
}

// waitEvent waits for the next event of type typ (after the last one
// waited for) and returns it; any CALL_CLOSED on the way fails the test
// unless that is what is awaited.
func (b *baresip) waitEvent(t testing.TB, typ string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		b.mu.Lock()
		for i := b.cursor; i < len(b.events); i++ {
			e := b.events[i]
			if e["type"] == typ {
				b.cursor = i + 1
				b.mu.Unlock()
				return e
			}
			if e["type"] == "CALL_CLOSED" || e["type"] == "REGISTER_FAIL" {
				b.cursor = i + 1
				b.mu.Unlock()
				t.Fatalf("baresip: %s while waiting for %s: %v", e["type"], typ, e)
			}
		}
		b.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("baresip: no %s event within %s; events: %v", typ, stepTimeout, b.eventTypes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *baresip) eventTypes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.events {
		out = append(out, fmt.Sprint(e["type"]))
	}
	return out
}

// heard is the file of the audio baresip decoded in its last call
// (sndfile's -dec dump), or "" before there is one.
func (b *baresip) heard() string {
	m, _ := filepath.Glob(filepath.Join(b.recDir, "*-dec.wav"))
	if len(m) == 0 {
		return ""
	}
	slices.Sort(m)
	return m[len(m)-1]
}

// clearRecordings forgets the dumps of earlier calls.
func (b *baresip) clearRecordings() {
	m, _ := filepath.Glob(filepath.Join(b.recDir, "*.wav"))
	for _, f := range m {
		_ = os.Remove(f)
	}
}

// --- linphonec ---------------------------------------------------------------

// linphonec is a running linphonec driven on stdin.
type linphonec struct {
	proc  *phoneProc
	dir   string
	stdin io.WriteCloser
	calls int // recordings made, to name the next one
}

// startLinphonec starts linphonec registered as user at the PBX on UDP, with
// the soundcard replaced by files: it plays tone to the far end.
func startLinphonec(t testing.TB, pbx *pbxProc, ports *softphonePorts, user, tone string) *linphonec {
	t.Helper()
	bin := requireSoftphone(t, "linphonec", "linphone-cli")
	dir := t.TempDir()
	sipPort, rtp := ports.take(t, 1), ports.take(t, 2)
	rc := fmt.Sprintf(`[sip]
sip_port=%d
sip_tcp_port=0
sip_tls_port=0
default_proxy=0
ipv6_enabled=0
register_only_when_network_is_up=0
[rtp]
audio_rtp_port=%d
audio_jitt_comp=60
[sound]
echocancellation=0
[video]
enabled=0
[net]
mtu=1300
[auth_info_0]
username=%s
passwd=%s-secret
realm=127.0.0.1
domain=127.0.0.1
[proxy_0]
reg_proxy=<sip:127.0.0.1:%d;transport=udp>
reg_route=<sip:127.0.0.1:%d;transport=udp;lr>
reg_identity=sip:%s@127.0.0.1
reg_expires=300
reg_sendregister=1
publish=0
dial_escape_plus=0
`, sipPort, rtp, user, user, pbx.sipPort, pbx.sipPort, user)
	rcPath := filepath.Join(dir, "linphonerc")
	if err := os.WriteFile(rcPath, []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	l := &linphonec{dir: dir, stdin: pw}
	l.proc = startPhoneProc(t, "linphonec "+user, dir, pr, bin, "-c", rcPath, "-d", "5", "-l", filepath.Join(dir, "linphone.log"))
	t.Cleanup(func() {
		pw.Close()
		if t.Failed() {
			t.Logf("linphonec %s SIP log (last lines):\n%s", user, tail(sipLines(l.log()), 80))
		}
	})
	l.command(t, "soundcard use files")
	l.command(t, "play "+tone)
	return l
}

// log is linphonec's debug log (SIP messages included).
func (l *linphonec) log() string {
	b, _ := os.ReadFile(filepath.Join(l.dir, "linphone.log"))
	return string(b)
}

// sipLines keeps the SIP messages and call states of a linphone log.
func sipLines(log string) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "-message-") && !strings.Contains(line, "moving from state") && !strings.Contains(line, "changed state") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// command writes one line to linphonec's prompt.
func (l *linphonec) command(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(l.stdin, line+"\n"); err != nil {
		t.Fatalf("linphonec %q: %v", line, err)
	}
}

// mark starts a new step: wait looks only at output written after it.
func (l *linphonec) mark() { l.proc.out.mark() }

// wait waits until linphonec printed substr since the last mark and
// returns that output.
func (l *linphonec) wait(t testing.TB, substr string) string {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		if out := l.proc.out.Since(); strings.Contains(out, substr) {
			return out
		}
		if time.Now().After(deadline) || l.proc.exited() {
			t.Fatalf("linphonec did not print %q within %s; it printed:\n%s", substr, stepTimeout, tail(l.proc.out.Since(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recordNext makes linphonec record the next call's received audio to a
// fresh file, whose path it returns.
func (l *linphonec) recordNext(t testing.TB) string {
	l.calls++
	path := filepath.Join(l.dir, fmt.Sprintf("heard-%d.wav", l.calls))
	l.command(t, "record "+path)
	return path
}

// waitRegistered polls baresip's registration table until its account
// shows OK (the REGISTER_OK event may come before ctrl_tcp is connected).
func (b *baresip) waitRegistered(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		info := b.command(t, "reginfo", "")
		if strings.Contains(info, "OK") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("baresip not registered within %s: %q", stepTimeout, info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRegistered polls linphonec's "status register" until it reports the
// registration.
func (l *linphonec) waitRegistered(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		l.mark()
		l.command(t, "status register")
		if strings.Contains(l.wait(t, "registered"), "registered, identity=") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("linphonec not registered within %s: %s", stepTimeout, l.proc.out.Since())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var rtpReceivedRe = regexp.MustCompile(`rcvd=(\d+)`)

// rtpReceived is how many RTP packets baresip's current call received, from
// its RTCP member table in audio_debug.
func (b *baresip) rtpReceived(t testing.TB) int {
	t.Helper()
	out := b.command(t, "audio_debug", "")
	m := rtpReceivedRe.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// waitMWI waits for an MWI_NOTIFY event (baresip's mwi module passes on
// the message-summary body of each NOTIFY it answers 200) whose body
// contains substr, and returns that body.
func (b *baresip) waitMWI(t testing.TB, substr string) string {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		b.mu.Lock()
		for _, e := range b.events {
			if body, _ := e["param"].(string); e["type"] == "MWI_NOTIFY" && strings.Contains(body, substr) {
				b.mu.Unlock()
				return body
			}
		}
		b.mu.Unlock()
		if time.Now().After(deadline) || b.proc.exited() {
			t.Fatalf("baresip: no MWI_NOTIFY with %q within %s; events: %v", substr, stepTimeout, b.eventTypes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
