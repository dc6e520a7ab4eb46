package e2e

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tcpProbe is one hostile TCP connection to the PBX and when it was closed.
type tcpProbe struct {
	dialled time.Time
	conn    net.Conn
	closed  chan time.Duration // after dialled; at once when the dial itself failed
}

// openProbes opens n connections from the loopback address from. Each stays
// silent, or with halfSent holds half an OPTIONS request; a goroutine per
// connection notes when the PBX closes it.
func openProbes(t testing.TB, from, to string, n int, halfSent bool) []*tcpProbe {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	probes := make([]*tcpProbe, 0, n)
	for i := 0; i < n; i++ {
		p := &tcpProbe{dialled: time.Now(), closed: make(chan time.Duration, 1)}
		probes = append(probes, p)
		c, err := d.Dial("tcp", to)
		if err != nil {
			p.closed <- 0 // reset before the dial completed: refused
			continue
		}
		p.conn = c
		t.Cleanup(func() { c.Close() })
		if halfSent {
			req := fmt.Sprintf("OPTIONS sip:pbx@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP %s;branch=z9hG4bKhalf%d\r\nFrom: <sip:x@127.0.0.1>;tag=1\r\n", c.LocalAddr(), i)
			if _, err := c.Write([]byte(req)); err != nil {
				p.closed <- 0 // reset by the time it wrote: refused
				continue
			}
		}
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			buf := make([]byte, 256)
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			p.closed <- time.Since(p.dialled)
		}()
	}
	return probes
}

// splitRefused waits until each probe is a second old and sorts them into
// those the PBX closed by then (refused on accept) and those still open.
func splitRefused(probes []*tcpProbe) (refused int, open []*tcpProbe) {
	for _, p := range probes {
		if wait := time.Until(p.dialled.Add(time.Second)); wait > 0 {
			select {
			case d := <-p.closed:
				p.closed <- d
			case <-time.After(wait):
			}
		}
		select {
		case d := <-p.closed:
			if d > time.Second { // accepted, and closed since: not a refusal
				p.closed <- d
				open = append(open, p)
				continue
			}
			refused++
		default:
			open = append(open, p)
		}
	}
	return refused, open
}

// waitAllClosed waits for every probe to be closed by the PBX, failing after
// limit from its dial; it returns the latest close.
func waitAllClosed(t testing.TB, probes []*tcpProbe, limit time.Duration) (earliest, latest time.Duration) {
	t.Helper()
	earliest = limit
	for i, p := range probes {
		select {
		case d := <-p.closed:
			latest, earliest = max(latest, d), min(earliest, d)
		case <-time.After(time.Until(p.dialled.Add(limit))):
			t.Fatalf("probe %d still open %s after it was dialled", i, limit)
		}
	}
	return earliest, latest
}

// lastCount returns the value of key in the last log line containing msg.
func lastCount(log, msg, key string) (int, bool) {
	re := regexp.MustCompile(`\b` + key + `=(\d+)`)
	found, n := false, 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil {
			n, _ = strconv.Atoi(m[1])
			found = true
		}
	}
	return n, found
}

// TestChaosTCPCapsAndTimeouts: hostile TCP connections past the per-source
// and total caps are refused at once and counted, silent ones are closed
// after sip.tcp.idleTimeout and half-sent requests after the message
// deadline; a phone registering over TCP (SIPp -t t1) succeeds while the
// attack holds its connections, and again once the total cap was reached
// and the attack timed out. The process stays up throughout.
func TestChaosTCPCapsAndTimeouts(t *testing.T) {
	requireSIPp(t)
	const maxConns, perSource, idle = 100, 30, 4 * time.Second
	p := startPBX(t, pbxConfig{NoCDR: true, LogLevel: "info",
		SIP: fmt.Sprintf("    tcp:\n      idleTimeout: %s\n      maxConnections: %d\n      maxPerSource: %d\n", idle, maxConns, perSource)})
	to := fmt.Sprintf("127.0.0.1:%d", p.sipPort)
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice")})
	start := time.Now()

	// Two sources open past their cap: silent connections from .2, half-sent
	// requests from .3.
	silent := openProbes(t, "127.0.0.2", to, perSource+15, false)
	half := openProbes(t, "127.0.0.3", to, perSource+15, true)
	refusedSilent, silentOpen := splitRefused(silent)
	refusedHalf, halfOpen := splitRefused(half)
	if refusedSilent != 15 || refusedHalf != 15 {
		t.Fatalf("refused past maxPerSource %d: %d silent, %d half-sent; want 15 each", perSource, refusedSilent, refusedHalf)
	}
	registerSIPp(t, p, dir, "tcp", "alice", freePort(t))

	// Three more sources fill the total cap. SIPp's connection may still
	// hold a slot when they dial, hence one refusal more.
	var more []*tcpProbe
	for _, from := range []string{"127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		more = append(more, openProbes(t, from, to, 20, false)...)
	}
	refusedMore, moreOpen := splitRefused(more)
	if refusedMore < 20 || refusedMore > 21 {
		t.Fatalf("refused past maxConnections %d: %d of 60, want 20 (21 while SIPp's slot is held)", maxConns, refusedMore)
	}
	if open := len(silentOpen) + len(halfOpen) + len(moreOpen); open > maxConns {
		t.Fatalf("%d hostile connections open, above maxConnections %d", open, maxConns)
	}

	// The silent connections are closed after the idle timeout, the
	// half-sent ones after the message deadline (10 s); the phone registers
	// again once slots are free.
	firstIdle, lastIdle := waitAllClosed(t, append(silentOpen, moreOpen...), idle+5*time.Second)
	if firstIdle < idle-100*time.Millisecond {
		t.Fatalf("a silent connection was closed %s after it opened, before the idle timeout %s", firstIdle, idle)
	}
	registerSIPp(t, p, dir, "tcp", "alice", freePort(t))
	firstHalf, lastHalf := waitAllClosed(t, halfOpen, 15*time.Second)
	select {
	case <-p.done:
		t.Fatalf("pbx exited: %v", p.exitErr)
	default:
	}

	// The refusals and closes are counted, in rate-limited log lines.
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := p.log.String()
		rs, _ := lastCount(log, "sip tcp connections refused over the caps", "refusedSource")
		rt, _ := lastCount(log, "sip tcp connections refused over the caps", "refusedTotal")
		ic, _ := lastCount(log, "sip tcp connections closed", "incompleteClosed")
		idc, _ := lastCount(log, "sip tcp connections closed", "idleClosed")
		if rs == refusedSilent+refusedHalf && rt == refusedMore && ic == len(halfOpen) && idc == len(silentOpen)+len(moreOpen) {
			t.Logf("%d connections from 5 sources: %d refused past maxPerSource, %d past maxConnections; %d silent closed %s-%s after opening (idleTimeout %s); %d half-sent requests closed %s-%s after opening; phone registered over TCP during and after; run %s",
				len(silent)+len(half)+len(more), rs, rt, idc, firstIdle.Round(time.Millisecond), lastIdle.Round(time.Millisecond), idle,
				ic, firstHalf.Round(time.Millisecond), lastHalf.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log counts: refusedSource=%d (want %d) refusedTotal=%d (want %d) incompleteClosed=%d (want %d) idleClosed=%d (want %d)",
				rs, refusedSilent+refusedHalf, rt, refusedMore, ic, len(halfOpen), idc, len(silentOpen)+len(moreOpen))
		}
		time.Sleep(50 * time.Millisecond) // polling the log
	}
	if n := strings.Count(p.log.String(), "sip tcp connections refused over the caps"); n > 3 {
		t.Errorf("%d log lines for the refusals; want at most one per 5 s", n)
	}
}

// TestChaosTCPSurvivesDescriptorExhaustion reproduces the remote exit: with
// the process's descriptor limit lowered below what the TCP caps allow,
// idle connections make accept fail with EMFILE. The listener retries
// instead of returning, the process stays up, and once the attacker lets go
// a phone registers over TCP on the same listener.
func TestChaosTCPSurvivesDescriptorExhaustion(t *testing.T) {
	requireSIPp(t)
	p := startPBX(t, pbxConfig{NoCDR: true, LogLevel: "info", SIP: "    tcp:\n      maxConnections: 4000\n      maxPerSource: 4000\n"})
	pid := p.cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	limit := len(fds) + 40
	setNoFile(t, pid, uint64(limit))
	to := fmt.Sprintf("127.0.0.1:%d", p.sipPort)

	const n = 150
	probes := openProbes(t, "127.0.0.2", to, n, false)
	p.waitLog("sip tcp accept failed; retrying", 10*time.Second) // fails if the process exited
	for _, pr := range probes {
		if pr.conn != nil {
			pr.conn.Close()
		}
	}
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice")})
	registerSIPp(t, p, dir, "tcp", "alice", freePort(t))
	select {
	case <-p.done:
		t.Fatalf("pbx exited: %v", p.exitErr)
	default:
	}
	errs, _ := lastCount(p.log.String(), "sip tcp accept failed; retrying", "acceptErrors")
	if errs == 0 {
		t.Fatal("accept errors not counted in the log")
	}
	t.Logf("%d idle connections against a descriptor limit of %d: accept failed (EMFILE) and was retried, %d failures in the first log line; the process stayed up and a phone registered over TCP afterwards", n, limit, errs)
}

// BenchmarkChaosTCPHalfSent: 1,024 half-sent requests from 16 sources
// against bin/pbx with the default sip.tcp settings (64 per source, 10 s
// message deadline). Every one must be closed; the metric is how long after
// its dial the last one was closed.
func BenchmarkChaosTCPHalfSent(b *testing.B) {
	p := startPBX(b, pbxConfig{NoCDR: true, LogLevel: "info"})
	to := fmt.Sprintf("127.0.0.1:%d", p.sipPort)
	for i := 0; i < b.N; i++ {
		var probes []*tcpProbe
		start := time.Now()
		for src := 0; src < 16; src++ {
			probes = append(probes, openProbes(b, fmt.Sprintf("127.0.1.%d", src+1), to, 64, true)...)
		}
		opened := time.Since(start)
		first, last := waitAllClosed(b, probes, 30*time.Second)
		for _, pr := range probes {
			if pr.conn != nil {
				pr.conn.Close()
			}
		}
		b.ReportMetric(last.Seconds(), "s-last-close")
		b.ReportMetric(first.Seconds(), "s-first-close")
		b.Logf("%d half-sent requests opened in %s: all closed, %s to %s after each was dialled", len(probes), opened.Round(time.Millisecond), first.Round(time.Millisecond), last.Round(time.Millisecond))
	}
}
