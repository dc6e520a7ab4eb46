package recording

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"pbx/rtpcore"
)

// BenchmarkRecordingPerPacket is what recording costs per packet in the
// PBX, without the relay: PBX_BENCH_CALLS recordings (default 500) of real
// legs, each party's tap handed one 20 ms packet per period as the relay
// would, the taps' packets handed to the recordings each 200 ms of the
// calls' time and every recording written to its file each 400 ms, as the
// writer loop does (here on the
// benchmark's goroutine, so the figure does not depend on how the machine
// schedules the relay and the writer). An op is one 20 ms period of every
// call; cpu-ns/pkt, the process's CPU time (not the wall clock, which on a
// busy machine counts waiting for a CPU), is the figure to hold against
// the relay's own CPU per packet (BenchmarkRecordedRelay).
func BenchmarkRecordingPerPacket(b *testing.B) {
	calls := envInt("PBX_BENCH_CALLS", 500)
	e, err := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1"), Quarantine: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	// The writer loop is left idle (a drain an hour); the benchmark drains.
	s, err := New(Options{DataDir: b.TempDir(), DrainEvery: time.Hour, FlushEvery: time.Hour}, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	recs := make([]*Recorder, calls)
	for i := range recs {
		sess, err := e.NewSession(rtpcore.SessionOptions{ID: fmt.Sprint(i)})
		if err != nil {
			b.Fatal(err)
		}
		var legs [2]*rtpcore.Leg
		for j := range legs {
			if legs[j], err = sess.NewLeg(fmt.Sprint(j)); err != nil {
				b.Fatal(err)
			}
		}
		recs[i], err = s.Start(Sidecar{ID: fmt.Sprintf("20261123T233000.000Z-b%05d", i), Tenant: "acme", Start: start},
			Legs{Caller: legs[0], Callee: legs[1], PayloadType: rtpcore.PayloadPCMA}, start)
		if err != nil {
			b.Fatal(err)
		}
	}
	raw := rtpcore.AppendHeader(nil, false, rtpcore.PayloadPCMA, 0, 0, 1)
	raw = append(raw, pcma(1000)...)
	var p rtpcore.Packet
	period := 0
	cpu0 := processCPU()
	for b.Loop() {
		at := start.Add(time.Duration(period) * 20 * time.Millisecond)
		for i, r := range recs {
			for side, t := range r.taps {
				p = rtpcore.Packet{Dir: rtpcore.In, Raw: raw, At: at,
					Header: rtpcore.Header{PayloadType: rtpcore.PayloadPCMA, Sequence: uint16(period), Timestamp: uint32(160 * period), SSRC: uint32(2*i + side)}}
				t.TapRTP(&p)
			}
		}
		if period++; period%10 == 0 {
			s.drainMu.Lock()
			s.sort()
			for slice := range drainSlices {
				s.serve(slice)
			}
			if period%20 == 0 {
				for _, r := range recs {
					r.write()
				}
			}
			s.drainMu.Unlock()
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*2*calls), "cpu-ns/pkt")
	var dropped uint64
	var stopped sync.WaitGroup // not s.Wait: the idle loop ends only at its next drain
	for _, r := range recs {
		dropped += r.Dropped()
		stopped.Add(1)
		r.Stop(Sidecar{}, time.Now(), func(_ *Sidecar, err error) {
			if err != nil {
				b.Error(err)
			}
			stopped.Done()
		})
	}
	stopped.Wait()
	if dropped > 0 {
		b.Fatalf("%d packets dropped", dropped)
	}
}
