package rtpcore

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// holdMode is what a call of runHoldLoad does.
type holdMode int

const (
	holdRelay  holdMode = iota // two-way relay: the call talking
	holdMusic                  // on hold: music looped to one phone, the other muted
	holdDirect                 // phones sending to each other: their own share
	// holdDirectHalf is the phones' share in the music mode's shape: both
	// send, one receives (the other sends into a socket nobody reads).
	holdDirectHalf
)

// BenchmarkMOH compares the CPU a call costs on hold with music (a looped
// Player paced into an Injection toward the held phone, as b2bua plays it,
// with the holder's leg muted by an idle Injection) against the same call
// relaying G.711 both ways. PBX_BENCH_CALLS calls (default 50) run for
// PBX_BENCH_SECONDS seconds (default 3); in every mode both phones send a
// 20 ms packet every 20 ms and read what reaches them. cpu-us/call-s is
// the whole process's CPU (phones included) per call and second of wall
// clock. The phones' own share, to subtract, is measured without the PBX in
// each mode's shape: phones (both send, both receive; for relay) and
// phones-half (both send, one receives; for moh). out-pkt/call-s is what
// reached the phones.
func BenchmarkMOH(b *testing.B) {
	calls := envInt("PBX_BENCH_CALLS", 50)
	secs := envInt("PBX_BENCH_SECONDS", 3)
	music := make([]int16, 8000*3+37) // 3 s, not a whole number of frames
	for i := range music {
		music[i] = int16((i*131)%16000 - 8000)
	}
	for _, m := range []struct {
		name string
		mode holdMode
	}{{"relay", holdRelay}, {"moh", holdMusic}, {"phones", holdDirect}, {"phones-half", holdDirectHalf}} {
		b.Run(m.name, func(b *testing.B) {
			var cpu time.Duration
			var out uint64
			for b.Loop() {
				cpu, out = runHoldLoad(b, calls, time.Duration(secs)*time.Second, m.mode, music)
			}
			callSecs := float64(calls) * float64(secs)
			b.ReportMetric(float64(cpu.Microseconds())/callSecs, "cpu-us/call-s")
			b.ReportMetric(float64(out)/callSecs, "out-pkt/call-s")
		})
	}
}

// runHoldLoad runs calls calls in mode for dur and returns the process's
// CPU over that time and the packets that reached the phones.
func runHoldLoad(tb testing.TB, calls int, dur time.Duration, mode holdMode, music []int16) (time.Duration, uint64) {
	tb.Helper()
	e, err := New(Options{BindIP: loopback, Quarantine: -1}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()
	type stream struct {
		ph  *phone
		to  netip.AddrPort
		seq uint16
	}
	var streams []*stream
	var players []func(ctx context.Context)
	for i := range calls {
		pa, pb := newPhone(tb), newPhone(tb)
		switch mode {
		case holdDirect:
			streams = append(streams, &stream{ph: pa, to: pb.addr()}, &stream{ph: pb, to: pa.addr()})
			continue
		case holdDirectHalf:
			sink := newPhone(tb) // never read: the kernel drops what overflows
			streams = append(streams, &stream{ph: pa, to: pb.addr()}, &stream{ph: pb, to: sink.addr()})
			continue
		}
		s, err := e.NewSession(SessionOptions{ID: fmt.Sprint("hold-", i)})
		if err != nil {
			tb.Fatal(err)
		}
		la, _ := s.NewLeg("holder")
		lb, err := s.NewLeg("held")
		if err != nil {
			tb.Fatal(err)
		}
		la.SetRemote(pa.addr())
		lb.SetRemote(pb.addr())
		if err := s.Bridge(la, lb); err != nil {
			tb.Fatal(err)
		}
		streams = append(streams, &stream{ph: pa, to: legTo(la)}, &stream{ph: pb, to: legTo(lb)})
		if mode == holdMusic {
			mute, err := la.Inject(PayloadPCMA)
			if err != nil {
				tb.Fatal(err)
			}
			defer mute.Close()
			p, err := NewPlayer(music, PlayerOptions{PayloadType: PayloadPCMA, Loop: true})
			if err != nil {
				tb.Fatal(err)
			}
			players = append(players, func(ctx context.Context) { _ = lb.Play(ctx, p, PayloadPCMA) })
		}
	}
	var recvd atomic.Uint64
	var rwg sync.WaitGroup
	for _, st := range streams {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			buf := make([]byte, 2048)
			for {
				if _, _, err := st.ph.conn.ReadFromUDPAddrPort(buf); err != nil {
					return
				}
				recvd.Add(1)
			}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var pwg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for _, play := range players {
		pwg.Add(1)
		go func() { defer pwg.Done(); play(ctx) }()
	}
	// Senders: each stream has its own 1 ms phase within the 20 ms period,
	// as in runLoad.
	const slots = 20
	shards := min(len(streams), 2*runtime.GOMAXPROCS(0))
	var swg sync.WaitGroup
	for g := range shards {
		swg.Add(1)
		go func() {
			defer swg.Done()
			var bySlot [slots][]*stream
			for i := g; i < len(streams); i += shards {
				bySlot[(i/shards)%slots] = append(bySlot[(i/shards)%slots], streams[i])
			}
			pkt := make([]byte, HeaderLen+160)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			next := int64(0)
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					for cur := int64(now.Sub(start) / time.Millisecond); next <= cur; next++ {
						for _, st := range bySlot[next%slots] {
							AppendHeader(pkt[:0], false, PayloadPCMA, st.seq, uint32(st.seq)*160, st.ph.ssrc)
							st.seq++
							_, _ = st.ph.conn.WriteToUDPAddrPort(pkt, st.to)
						}
					}
				}
			}
		}()
	}
	timer := time.NewTimer(dur)
	<-timer.C
	cancel()
	swg.Wait()
	pwg.Wait()
	cpu := cpuTime() - cpu0
	for _, st := range streams {
		st.ph.conn.Close()
	}
	rwg.Wait()
	return cpu, recvd.Load()
}
