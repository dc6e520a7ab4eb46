package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawMarker is in every flood datagram: it must never reach the log.
const rawMarker = "RAWMARK"

// malformedDatagram returns the i-th fuzz datagram: random bytes, a SIP
// request cut short, or one with broken headers, each carrying rawMarker.
func malformedDatagram(rng *rand.Rand, i int, local string) []byte {
	valid := fmt.Sprintf("INVITE sip:%s-%d@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK%d\r\n"+
		"From: <sip:a@127.0.0.1>;tag=%d\r\nTo: <sip:100@127.0.0.1>\r\nCall-ID: %s-%d\r\nCSeq: 1 INVITE\r\n"+
		"Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n", rawMarker, i, local, i, i, rawMarker, i)
	switch i % 5 {
	case 0: // random bytes
		b := make([]byte, 8+rng.IntN(600))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		copy(b[rng.IntN(len(b)-len(rawMarker)):], rawMarker)
		return b
	case 1: // truncated in its headers
		cut := 40 + rng.IntN(len(valid)-60)
		return []byte(valid[:cut])
	case 2: // a header with no value, then garbage
		return []byte(strings.Replace(valid, "CSeq: 1 INVITE", "CSeq: "+rawMarker+" x y", 1))
	case 3: // a broken start line
		return []byte(rawMarker + " \x00\xff " + valid[10:])
	default: // no Via: parses, but no transaction key
		return []byte(strings.Replace(valid, "Via: SIP/2.0/UDP "+local+fmt.Sprintf(";branch=z9hG4bK%d\r\n", i), "", 1))
	}
}

// optionsProbe sends OPTIONS from its own socket until stopped, counting
// those answered within two seconds.
type optionsProbe struct {
	sent, answered atomic.Int32
	stop           chan struct{}
	done           sync.WaitGroup
}

func startOptionsProbe(t *testing.T, sipPort int) *optionsProbe {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		t.Fatal(err)
	}
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}
	p := &optionsProbe{stop: make(chan struct{})}
	p.done.Go(func() {
		defer c.Close()
		buf := make([]byte, 4096)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			branch := fmt.Sprintf("probe%d", i)
			req := fmt.Sprintf("OPTIONS sip:pbx@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK%s;rport\r\n"+
				"From: <sip:probe@127.0.0.1>;tag=1\r\nTo: <sip:pbx@127.0.0.1>\r\nCall-ID: %s\r\nCSeq: 1 OPTIONS\r\n"+
				"Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n", c.LocalAddr(), branch, branch)
			if _, err := c.WriteTo([]byte(req), to); err != nil {
				return
			}
			p.sent.Add(1)
			deadline := time.Now().Add(2 * time.Second)
			for {
				_ = c.SetReadDeadline(deadline)
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					break
				}
				if strings.HasPrefix(string(buf[:n]), "SIP/2.0 200") && strings.Contains(string(buf[:n]), branch) {
					p.answered.Add(1)
					break
				}
			}
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return p
}

func (p *optionsProbe) finish() (sent, answered int) {
	close(p.stop)
	p.done.Wait()
	return int(p.sent.Load()), int(p.answered.Load())
}

// sendPaced sends n datagrams from c to the PBX, about perSecond a second.
func sendPaced(t *testing.T, c *net.UDPConn, to *net.UDPAddr, n, perSecond int, gen func(i int) []byte) {
	t.Helper()
	const tick = 5 * time.Millisecond
	perTick := max(1, perSecond*int(tick)/int(time.Second))
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for i := 0; i < n; {
		for j := 0; j < perTick && i < n; j, i = j+1, i+1 {
			if _, err := c.WriteToUDP(gen(i), to); err != nil {
				t.Fatal(err)
			}
		}
		<-tk.C
	}
}

var logKeyPair = regexp.MustCompile(`(?:^| )([^ =]+)=("(?:[^"\\]|\\.)*"|[^ ]*)`)

// floodLog is what the PBX wrote while one flood ran.
type floodLog struct {
	lines   []string
	bytes   int
	elapsed time.Duration // from the flood's start to its summary line
	// during and floodTime count the lines written while the flood was sent.
	during    int
	floodTime time.Duration
}

func (f floodLog) perSecond() float64 { return float64(len(f.lines)) / f.elapsed.Seconds() }

func (f floodLog) perSecondDuring() float64 { return float64(f.during) / f.floodTime.Seconds() }

// runFlood marks the log, runs flood, then waits for the summary of what the
// rate limiter suppressed (written every 10s) and returns the log since the
// mark. elapsed runs from the flood's start to the summary.
func runFlood(t *testing.T, p *pbxProc, summaryKind string, flood func()) floodLog {
	t.Helper()
	p.log.mark()
	start := time.Now()
	flood()
	floodTime := time.Since(start)
	during := strings.Count(p.log.Since(), "\n")
	waitFor(t, "the suppressed-messages summary of "+summaryKind, 15*time.Second, func() bool {
		for _, l := range strings.Split(p.log.Since(), "\n") {
			if strings.Contains(l, "similar messages") && strings.Contains(l, "kind="+summaryKind) {
				return true
			}
		}
		return false
	})
	out := p.log.Since()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return floodLog{lines: lines, bytes: len(out), elapsed: time.Since(start), during: during, floodTime: floodTime}
}

// checkFloodLog asserts the bound and the hygiene of every line.
func checkFloodLog(t *testing.T, name string, f floodLog) {
	t.Helper()
	t.Logf("%s: %d lines while it was sent in %s (%.1f lines/s); %d lines, %d bytes up to its summary %s after the start (%.1f lines/s)",
		name, f.during, f.floodTime.Round(time.Millisecond), f.perSecondDuring(), len(f.lines), f.bytes, f.elapsed.Round(time.Millisecond), f.perSecond())
	if f.perSecond() >= 100 || f.perSecondDuring() >= 100 {
		t.Errorf("%s: over 100 lines/s; lines per message: %v", name, messageCounts(f.lines))
	}
	for _, l := range f.lines {
		if strings.Contains(l, rawMarker) {
			t.Errorf("%s: raw payload in the log: %s", name, l)
		}
	}
	assertNoDuplicateKeys(t, strings.Join(f.lines, "\n"))
}

// messageCounts counts log lines by their msg.
func messageCounts(lines []string) map[string]int {
	out := map[string]int{}
	for _, l := range lines {
		for _, m := range logKeyPair.FindAllStringSubmatch(l, -1) {
			if m[1] == "msg" {
				out[m[2]]++
			}
		}
	}
	return out
}

// assertNoDuplicateKeys fails for each line of a text log that repeats an
// attribute key (slog allows it; readers of the log take one of the values).
func assertNoDuplicateKeys(t *testing.T, log string) {
	t.Helper()
	bad := 0
	for _, l := range strings.Split(log, "\n") {
		seen := map[string]bool{}
		for _, m := range logKeyPair.FindAllStringSubmatch(l, -1) {
			if seen[m[1]] && bad < 10 {
				bad++
				t.Errorf("key %s twice: %s", m[1], l)
			}
			seen[m[1]] = true
		}
	}
}

// TestChaosLogFloods: 50,000 malformed datagrams, then 5,000 SUBSCRIBEs and
// 5,000 requests of an unknown method, then 3,000 wrong passwords, against bin/pbx at its production log
// level and at debug level. Under each flood the log stays under 100 lines a second, never
// holds the datagrams' bytes or a key twice, reports what it suppressed, and
// the PBX keeps answering OPTIONS from another address (issue 15.5, 14.8).
func TestChaosLogFloods(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		t.Run(level, func(t *testing.T) { chaosLogFloods(t, level) })
	}
}

func chaosLogFloods(t *testing.T, level string) {
	const guesses = 3000
	p := startPBX(t, pbxConfig{NoCDR: true, LogLevel: level})
	probe := startOptionsProbe(t, p.sipPort)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p.sipPort}
	local := c.LocalAddr().String()
	rng := rand.New(rand.NewPCG(1, 2))

	fuzz := runFlood(t, p, "sip.malformed", func() {
		sendPaced(t, c, to, 50000, 15000, func(i int) []byte { return malformedDatagram(rng, i, local) })
	})
	checkFloodLog(t, "50,000 malformed datagrams", fuzz)
	if !strings.Contains(strings.Join(fuzz.lines, "\n"), "src="+local) {
		t.Errorf("no malformed-message line names the source %s", local)
	}

	methods := runFlood(t, p, "sip.unknown_method", func() {
		sendPaced(t, c, to, 10000, 5000, func(i int) []byte {
			method := "SUBSCRIBE"
			if i%2 == 1 {
				method = "FOOBAR"
			}
			return fmt.Appendf(nil, "%s sip:100@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bKsub%d\r\n"+
				"From: <sip:a@127.0.0.1>;tag=%d\r\nTo: <sip:100@127.0.0.1>\r\nCall-ID: sub-%d\r\nCSeq: 1 %s\r\n"+
				"Event: message-summary\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n", method, local, i, i, i, method)
		})
	})
	checkFloodLog(t, "5,000 SUBSCRIBE + 5,000 FOOBAR", methods)
	for _, l := range methods.lines {
		if level == "info" && strings.Contains(l, "method=SUBSCRIBE") {
			t.Errorf("a refused SUBSCRIBE logged above debug level: %s", l)
			break
		}
	}

	// Password guesses (the guard is off here, so nothing is banned).
	dir := scenarioDir(t, map[string]string{"guesses.csv": wrongPasswords(guesses)})
	auth := runFlood(t, p, "sip.auth_failure", func() {
		r := startSIPpLoad(t, dir, "guess", time.Minute, fmt.Sprintf("127.0.0.1:%d", p.sipPort),
			"-sf", "register_wrong.xml", "-inf", "guesses.csv", "-r", "1000", "-m", strconv.Itoa(guesses), "-l", "200",
			"-i", "127.0.0.4", "-p", strconv.Itoa(freePort(t)))
		if code := r.wait(); code != 0 {
			t.Errorf("guesses: sipp exit %d\n%s", code, r.errors(dir))
		}
	})
	checkFloodLog(t, fmt.Sprintf("%d wrong passwords", guesses), auth)
	if !strings.Contains(strings.Join(auth.lines, "\n"), `msg="authentication failed" component=sip src=127.0.0.4:`) {
		t.Errorf("no authentication failure line with its source")
	}

	sent, answered := probe.finish()
	t.Logf("OPTIONS from another address during the floods: %d of %d answered", answered, sent)
	if sent == 0 || answered*2 < sent {
		t.Errorf("OPTIONS answered %d of %d during the floods, want at least half", answered, sent)
	}
	// And after them, at once.
	after := startOptionsProbe(t, p.sipPort)
	waitFor(t, "an OPTIONS answered after the floods", 10*time.Second, func() bool { return after.answered.Load() > 0 })
	after.finish()
}
