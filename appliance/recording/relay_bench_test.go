package recording

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"pbx/rtpcore"
)

// relayLoad is what one run of runRelayLoad measured.
type relayLoad struct {
	packets   int
	jitterP99 time.Duration
	cpuPerPkt time.Duration
}

// runRelayLoad holds calls bridged sessions on loopback for dur, each
// phone sending a 20 ms PCMA packet every 20 ms, every call recorded when
// record is set, and measures the delay variation the relay adds
// (|(R_i - R_i-1) - (S_i - S_i-1)| per stream) and the process CPU per
// packet relayed.
func runRelayLoad(b *testing.B, calls int, dur time.Duration, record bool) relayLoad {
	e, err := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1"), Quarantine: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	s, err := New(Options{DataDir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	type stream struct {
		conn *net.UDPConn
		to   netip.AddrPort
	}
	var streams []stream
	var recs []*Recorder
	for i := 0; i < calls; i++ {
		sess, err := e.NewSession(rtpcore.SessionOptions{ID: fmt.Sprint(i)})
		if err != nil {
			b.Fatal(err)
		}
		la, _ := sess.NewLeg("a")
		lb, _ := sess.NewLeg("b")
		var pa, pb *net.UDPConn
		for _, c := range []**net.UDPConn{&pa, &pb} {
			if *c, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
				b.Fatal(err)
			}
			defer (*c).Close()
		}
		la.SetRemote(pa.LocalAddr().(*net.UDPAddr).AddrPort())
		lb.SetRemote(pb.LocalAddr().(*net.UDPAddr).AddrPort())
		if err := sess.Bridge(la, lb); err != nil {
			b.Fatal(err)
		}
		streams = append(streams, stream{pa, la.LocalAddr()}, stream{pb, lb.LocalAddr()})
		if record {
			r, err := s.Start(Sidecar{ID: fmt.Sprintf("20261121T151230.000Z-r%07d", i), Tenant: "acme", Start: time.Now()},
				Legs{Caller: la, Callee: lb, PayloadType: rtpcore.PayloadPCMA}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, r)
		}
	}
	epoch := time.Now()
	var mu sync.Mutex
	var deltas []time.Duration
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Add(1)
		go func(c *net.UDPConn) {
			defer wg.Done()
			buf := make([]byte, 2048)
			var mine []time.Duration
			var lastS, lastR int64
			have := false
			for {
				n, err := c.Read(buf)
				if err != nil {
					break
				}
				r := int64(time.Since(epoch))
				if n < rtpcore.HeaderLen+8 {
					continue
				}
				sent := int64(binary.BigEndian.Uint64(buf[rtpcore.HeaderLen:]))
				if have {
					d := time.Duration((r - lastR) - (sent - lastS))
					mine = append(mine, max(d, -d))
				}
				lastS, lastR, have = sent, r, true
			}
			mu.Lock()
			deltas = append(deltas, mine...)
			mu.Unlock()
		}(st.conn)
	}
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	tick := time.NewTicker(20 * time.Millisecond)
	pkt := make([]byte, rtpcore.HeaderLen+160)
	sent := 0
	for seq := 0; time.Since(epoch) < dur; seq++ {
		<-tick.C
		for i, st := range streams {
			p := rtpcore.AppendHeader(pkt[:0], false, rtpcore.PayloadPCMA, uint16(seq), uint32(160*seq), uint32(i+1))
			p = binary.BigEndian.AppendUint64(p, uint64(time.Since(epoch)))
			p = p[:rtpcore.HeaderLen+160]
			if _, err := st.conn.WriteToUDPAddrPort(p, st.to); err == nil {
				sent++
			}
		}
	}
	tick.Stop()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	for _, r := range recs {
		r.Stop(Sidecar{}, time.Now(), nil)
	}
	s.Wait()
	for _, st := range streams {
		st.conn.SetReadDeadline(time.Now())
	}
	wg.Wait()
	slices.Sort(deltas)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
	res := relayLoad{packets: sent}
	if len(deltas) > 0 {
		res.jitterP99 = deltas[len(deltas)*99/100]
	}
	if sent > 0 {
		res.cpuPerPkt = cpu / time.Duration(sent)
	}
	return res
}

// BenchmarkRecordedRelay runs PBX_BENCH_CALLS calls (default 50) for
// PBX_BENCH_SECONDS (default 5) through a real relay, unrecorded then
// recorded, and reports the added jitter p99 of each and the CPU per
// packet (phones included): the figures are 500 calls, at most
// 25% more CPU and the jitter p99 within 0.2 ms.
func BenchmarkRecordedRelay(b *testing.B) {
	calls, secs := 50, 5
	if v, err := strconv.Atoi(os.Getenv("PBX_BENCH_CALLS")); err == nil && v > 0 {
		calls = v
	}
	if v, err := strconv.Atoi(os.Getenv("PBX_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	var plain, rec relayLoad
	for b.Loop() {
		// Recorded first, so that whatever a second run gains (warm
		// caches, grown heap) does not flatter the recording.
		rec = runRelayLoad(b, calls, time.Duration(secs)*time.Second, true)
		plain = runRelayLoad(b, calls, time.Duration(secs)*time.Second, false)
	}
	b.ReportMetric(float64(plain.jitterP99.Microseconds()), "jitter-p99-µs")
	b.ReportMetric(float64(rec.jitterP99.Microseconds()), "rec-jitter-p99-µs")
	b.ReportMetric(float64(plain.cpuPerPkt.Nanoseconds()), "cpu-ns/pkt")
	b.ReportMetric(float64(rec.cpuPerPkt.Nanoseconds()), "rec-cpu-ns/pkt")
	b.Logf("%d calls for %ds: unrecorded %d packets, jitter p99 %v, cpu %v/pkt; recorded %d packets, jitter p99 %v, cpu %v/pkt",
		calls, secs, plain.packets, plain.jitterP99, plain.cpuPerPkt, rec.packets, rec.jitterP99, rec.cpuPerPkt)
}
