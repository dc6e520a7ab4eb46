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

// The RTP probe of the held-calls phase: one more call, set up by SIPp
// (bench_uac_probe.xml) while the others are up, whose caller's media is the
// benchmark's own socket. It sends RTP through the relay to the callee's
// SIPp, which echoes it back through the relay, and times each packet's
// round trip: the variation of that round trip is an upper bound of the
// jitter the relay adds (it crosses the relay twice, and SIPp's echo and
// the benchmark's own scheduling add theirs), and the packets that never
// came back are the round trip's loss.

// probeInterval spaces the probe's packets: four times a call's rate, for
// loss to be resolved finer than 0.1% in a few seconds.
const probeInterval = 5 * time.Millisecond

// rtpProbe is what the probe measured.
type rtpProbe struct {
	sent, received int
	// jitterP99 is the 99th percentile of each round trip minus the
	// shortest one (two passes through the relay).
	jitterP99 time.Duration
	err       string // why nothing was measured
}

// loss is the share of the probe's packets that did not come back, in percent.
func (p rtpProbe) loss() float64 {
	return percent(float64(p.sent-p.received), float64(p.sent))
}

// probeStats computes the figures from the round trips of the packets that
// came back, out of sent.
func probeStats(sent int, rtts []time.Duration) rtpProbe {
	p := rtpProbe{sent: sent, received: len(rtts)}
	if len(rtts) == 0 {
		return p
	}
	sorted := slices.Clone(rtts)
	slices.Sort(sorted)
	idx := (len(sorted)*99+99)/100 - 1
	p.jitterP99 = sorted[idx] - sorted[0]
	return p
}

// probeCall is a probe call being set up; run measures over it.
type probeCall struct {
	conn  *net.UDPConn
	sipp  *sippRun
	log   string
	relay *net.UDPAddr
}

// startProbeCall binds the probe's socket and calls bob through s from
// SIPp with that socket as the media, held for hold.
func startProbeCall(b *testing.B, s *sut, dir string, hold time.Duration) *probeCall {
	b.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetReadBuffer(1 << 20)
	port := conn.LocalAddr().(*net.UDPAddr).Port
	c := &probeCall{conn: conn, log: filepath.Join(dir, "probe.log")}
	c.sipp = startSIPpArgs(b, dir, "probe", hold+2*time.Minute, s.addr, "-sf", "bench_uac_probe.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", "101@"+s.addr, "-key", "probe_port", strconv.Itoa(port), "-m", "1",
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

// run sends RTP every probeInterval for d to the relay and collects what
// comes back until a second after the last packet. It runs in its own
// goroutine: it fails nothing, it reports.
func (c *probeCall) run(d time.Duration) rtpProbe {
	rtts := make(chan []time.Duration, 1)
	start := time.Now()
	go func() {
		var got []time.Duration
		seen := map[uint32]bool{}
		buf := make([]byte, 1500)
		_ = c.conn.SetReadDeadline(start.Add(d + time.Second))
		for {
			n, err := c.conn.Read(buf)
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
		rtts <- got
	}()
	pkt := make([]byte, 12+160)
	pkt[0], pkt[1] = 0x80, 8 // RTP version 2, PCMA
	binary.BigEndian.PutUint32(pkt[8:], 0x50b0be01)
	sent := 0
	tick := time.NewTicker(probeInterval)
	for time.Since(start) < d {
		<-tick.C
		binary.BigEndian.PutUint16(pkt[2:], uint16(sent))
		binary.BigEndian.PutUint32(pkt[4:], uint32(sent*160))
		binary.BigEndian.PutUint32(pkt[12:], uint32(sent))
		binary.BigEndian.PutUint64(pkt[16:], uint64(time.Since(start)))
		if _, err := c.conn.WriteToUDP(pkt, c.relay); err == nil {
			sent++
		}
	}
	tick.Stop()
	return probeStats(sent, <-rtts)
}

// startProbe sets a probe call up on s and measures over d in the
// background; the channel gets the figures, or at once the reason when the
// call is not answered.
func startProbe(b *testing.B, s *sut, dir string, d time.Duration) <-chan rtpProbe {
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
	return fmt.Sprintf("jitter p99 %s, loss %.2f%% (%d of %d packets back, round trip)",
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
