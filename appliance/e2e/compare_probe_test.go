package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The RTP probe of the held-calls phase: one more call, from alice to carol,
// set up by SIPp (bench_uac_probe.xml, bench_uas_probe.xml) while the others
// are up, whose media at both ends are the benchmark's own sockets. It sends
// RTP from the caller's socket through the relay and times each packet's
// one-way transit to the callee's socket on the same clock: the variation
// of that transit is the jitter the relay adds (with the benchmark's own
// scheduling, on a loaded machine), and the packets that never arrived the
// relay's loss.

// probeInterval spaces the probe's packets: four times a call's rate, for
// loss to be resolved finer than 0.1% in a few seconds.
const probeInterval = 5 * time.Millisecond

// rtpProbe is what the probe measured.
type rtpProbe struct {
	sent, received int
	// jitterP99 is the 99th percentile of each packet's transit minus the
	// shortest one.
	jitterP99 time.Duration
	err       string // why nothing was measured
}

// loss is the share of the probe's packets that did not arrive, in percent.
func (p rtpProbe) loss() float64 {
	return percent(float64(p.sent-p.received), float64(p.sent))
}

// probeStats computes the figures from the transits of the packets that
// arrived, out of sent.
func probeStats(sent int, transits []time.Duration) rtpProbe {
	p := rtpProbe{sent: sent, received: len(transits)}
	if len(transits) == 0 {
		return p
	}
	sorted := slices.Clone(transits)
	slices.Sort(sorted)
	idx := (len(sorted)*99+99)/100 - 1
	p.jitterP99 = sorted[idx] - sorted[0]
	return p
}

// probeCall is a probe call being set up; run measures over it.
type probeCall struct {
	from, to *net.UDPConn // the caller's and the callee's media
	log      string
	relay    *net.UDPAddr // where the caller sends: the relay's side for it
}

// startProbeCall binds the probe's sockets, registers carol with a SIPp
// UAS whose media is the callee's socket, and calls her through s from a
// SIPp whose media is the caller's socket, held for hold.
func startProbeCall(b testing.TB, s *sut, dir string, hold time.Duration) *probeCall {
	b.Helper()
	bind := func() (*net.UDPConn, string) {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		_ = conn.SetReadBuffer(1 << 20)
		return conn, strconv.Itoa(conn.LocalAddr().(*net.UDPAddr).Port)
	}
	from, fromPort := bind()
	to, toPort := bind()
	c := &probeCall{from: from, to: to, log: filepath.Join(dir, "probe.log")}
	carolPort := freePort(b)
	registerAt(b, s.addr, dir, "carol", carolPort)
	startSIPpArgs(b, dir, "probe-uas", hold+2*time.Minute, s.addr, "-sf", "bench_uas_probe.xml", "-key", "probe_port", toPort,
		"-m", "1", "-p", strconv.Itoa(carolPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(b)), "-t", "u1")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	startSIPpArgs(b, dir, "probe", hold+2*time.Minute, s.addr, "-sf", "bench_uac_probe.xml", "-inf", "alice.csv",
		"-s", "102", "-auth_uri", "102@"+s.addr, "-key", "probe_port", fromPort, "-m", "1",
		"-d", strconv.Itoa(int(hold/time.Millisecond)), "-recv_timeout", "10000", "-trace_logs", "-log_file", c.log,
		"-p", strconv.Itoa(freePort(b)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(b)), "-t", "u1")
	return c
}

// answered waits up to within for the call's answer and reads the relay's
// address from it; false when it did not come.
func (c *probeCall) answered(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if addr, ok := relayFromLog(readFileString(c.log)); ok {
			c.relay = addr
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// relayFromLog finds the "relay <ip> <port>" line bench_uac_probe.xml logs.
func relayFromLog(log string) (*net.UDPAddr, bool) {
	for _, l := range strings.Split(log, "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "relay")
		if i < 0 || i+2 >= len(f) {
			continue
		}
		ip := net.ParseIP(f[i+1])
		port, err := strconv.Atoi(f[i+2])
		if ip != nil && err == nil && port > 0 {
			return &net.UDPAddr{IP: ip, Port: port}, true
		}
	}
	return nil, false
}

// run sends RTP every probeInterval for d from the caller's socket to the
// relay and collects what reaches the callee's until a second after the
// last packet. It fails nothing, it reports (it runs in its own goroutine).
func (c *probeCall) run(d time.Duration) rtpProbe {
	transits := make(chan []time.Duration, 1)
	start := time.Now()
	go func() {
		var got []time.Duration
		seen := map[uint32]bool{}
		buf := make([]byte, 1500)
		_ = c.to.SetReadDeadline(start.Add(d + time.Second))
		for {
			n, err := c.to.Read(buf)
			if err != nil {
				break
			}
			now := time.Since(start)
			if n < 12+12 {
				continue
			}
			seq := binary.BigEndian.Uint32(buf[12:])
			sentAt := time.Duration(binary.BigEndian.Uint64(buf[16:]))
			if !seen[seq] {
				seen[seq] = true
				got = append(got, now-sentAt)
			}
		}
		transits <- got
	}()
	pkt := make([]byte, 12+160)
	pkt[0], pkt[1] = 0x80, 8 // RTP version 2, PCMA
	binary.BigEndian.PutUint32(pkt[8:], 0x50b0be01)
	sent := 0
	// Packet i leaves at i intervals from the start, at once when the
	// sender is late (a ticker would drop the ticks of a busy machine).
	for i := 0; time.Duration(i)*probeInterval < d; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * probeInterval)))
		binary.BigEndian.PutUint16(pkt[2:], uint16(sent))
		binary.BigEndian.PutUint32(pkt[4:], uint32(sent*160))
		binary.BigEndian.PutUint32(pkt[12:], uint32(sent))
		binary.BigEndian.PutUint64(pkt[16:], uint64(time.Since(start)))
		if _, err := c.from.WriteToUDP(pkt, c.relay); err == nil {
			sent++
		}
	}
	return probeStats(sent, <-transits)
}

// startProbe sets a probe call up on s and measures over d in the
// background; the channel gets the figures, or at once the reason when the
// call is not answered.
func startProbe(b testing.TB, s *sut, dir string, d time.Duration) <-chan rtpProbe {
	out := make(chan rtpProbe, 1)
	c := startProbeCall(b, s, dir, d+3*time.Second)
	if !c.answered(10 * time.Second) {
		out <- rtpProbe{err: fmt.Sprintf("probe call not answered: %s", strings.TrimSpace(tail(readFileString(filepath.Join(dir, "probe.errors.log")), 3)))}
		return out
	}
	go func() { out <- c.run(d) }()
	return out
}

// probeCell is the probe's jitter and loss.
func probeCell(p rtpProbe) string {
	switch {
	case p.err != "":
		return p.err
	case p.sent == 0:
		return verdictNone
	}
	return fmt.Sprintf("jitter p99 %s, loss %.2f%% (%d of %d packets arrived)",
		p.jitterP99.Round(10*time.Microsecond), p.loss(), p.received, p.sent)
}

// probeVerdict judges the PBX's probe against issue 16's bounds.
func probeVerdict(p rtpProbe) string {
	switch {
	case p.err != "" || p.sent == 0:
		return "n/a: not measured"
	case p.received > 0 && p.jitterP99 < time.Millisecond && p.loss() < 0.1:
		return verdictMet
	}
	return verdictNotMet
}

// TestCompareProbe sets the probe call up through a real bin/pbx (records
// off, no other call) and checks that its packets cross the relay: every
// one arrives, with a transit jitter far under a second.
func TestCompareProbe(t *testing.T) {
	requireSIPp(t)
	docs, _ := benchAccounts(0)
	s := startComparePBX(t, docs, true, false)
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice"), "carol.csv": credentials("carol")})
	p := <-startProbe(t, s, dir, time.Second)
	if p.err != "" {
		t.Fatal(p.err)
	}
	if p.sent < 190 || p.loss() >= 1 || p.jitterP99 <= 0 || p.jitterP99 > 200*time.Millisecond {
		t.Fatalf("probe through the pbx: %s", probeCell(p))
	}
	t.Logf("probe through an idle pbx: %s", probeCell(p))
	// The probe's caller hangs up after its hold (3s past the measure).
	deadline := time.Now().Add(15 * time.Second)
	for s.mediaSessions() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the probe call did not end after its hold")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
