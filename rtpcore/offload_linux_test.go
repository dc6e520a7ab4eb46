package rtpcore

import (
	"bytes"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"pbx/rtpcore/kfwd"
)

// kernelEngine returns an engine forwarding in the kernel; as root (CI)
// the kernel must take it.
func kernelEngine(t *testing.T) *Engine {
	e := newEngine(t, Options{KernelForwarding: true})
	if !e.KernelForwarding() {
		if os.Geteuid() == 0 && kfwd.KernelHasTCX() {
			t.Fatal("kernel forwarding did not load as root on a kernel with tcx")
		}
		t.Skip("kernel forwarding needs CAP_BPF and CAP_NET_ADMIN")
	}
	return e
}

func directions(e *Engine) int { return e.Stats().KernelDirections }

// exchange sends n packets each way, a millisecond apart, and checks that
// each arrives whole from the other leg.
func exchange(t *testing.T, la, lb *Leg, pa, pb *phone, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, d := range []struct {
			from, to *phone
			in, out  *Leg
		}{{pa, pb, la, lb}, {pb, pa, lb, la}} {
			pkt := d.from.packet(PayloadPCMA, 160)
			d.from.sendTo(legTo(d.in), pkt)
			got, src := d.to.recv(5 * time.Second)
			if !bytes.Equal(got, pkt) || src != d.out.LocalAddr() {
				t.Fatalf("packet %d: %d bytes from %v, want %d from %v", i, len(got), src, len(pkt), d.out.LocalAddr())
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKernelForwarding(t *testing.T) {
	e := kernelEngine(t)
	s, la, lb, pa, pb := bridgedPair(t, e)
	la.SetTelephoneEventPT(101)
	lb.SetTelephoneEventPT(101)
	var events atomic.Int32
	la.AddEventTap(TapFunc(func(*Packet) { events.Add(1) }))

	// Settled streams move into the kernel.
	exchange(t, la, lb, pa, pb, offloadAfter+5)
	waitFor(t, "both directions in the kernel", func() bool { return directions(e) == 2 })
	if st := e.Stats(); st.KernelDirections != 2 || st.KernelMoves != 2 {
		t.Errorf("engine stats: %d directions in the kernel, %d moves; want 2 and 2", st.KernelDirections, st.KernelMoves)
	}
	la.mu.Lock()
	byRelay := la.in.packets
	la.mu.Unlock()

	// In the kernel: relayed, counted, loss seen, the relay idle.
	exchange(t, la, lb, pa, pb, 20)
	pa.seq += 2 // two lost
	exchange(t, la, lb, pa, pb, 20)
	la.mu.Lock()
	if la.in.packets != byRelay {
		t.Errorf("the relay handled %d packets of a direction in the kernel", la.in.packets-byRelay)
	}
	la.mu.Unlock()
	want := uint64(offloadAfter + 45)
	// The phones send 20 ms of audio every millisecond or two: a jitter
	// of 18-19 ms, kept on by the kernel.
	if st := la.Stats(); st.PacketsIn != want || st.PacketsLost != 2 || st.BytesIn != want*(HeaderLen+160) || st.Jitter < 12*time.Millisecond || st.Jitter > 20*time.Millisecond {
		t.Errorf("caller leg in the kernel: in %d (%d bytes), lost %d, jitter %v; want %d, 2 lost", st.PacketsIn, st.BytesIn, st.PacketsLost, st.Jitter, want)
	}
	if st := lb.Stats(); st.PacketsOut != want || st.PacketsIn != want || st.PacketsLost != 0 {
		t.Errorf("callee leg: out %d in %d lost %d, want %d and %d", st.PacketsOut, st.PacketsIn, st.PacketsLost, want, want)
	}
	if idle := s.Idle(); idle > time.Second {
		t.Errorf("session idle %v while the kernel relays", idle)
	}

	// A telephone event goes through the relay, to the tap and on.
	ev := pa.packet(101, 4)
	pa.sendTo(legTo(la), ev)
	if got, _ := pb.recv(5 * time.Second); !bytes.Equal(got, ev) {
		t.Fatalf("telephone event: %x", got)
	}
	waitFor(t, "the event tap", func() bool { return events.Load() == 1 })
	if directions(e) != 2 {
		t.Errorf("a telephone event took a direction out of the kernel")
	}

	// A new stream (SSRC) is the relay's again, then the kernel's.
	time.Sleep(offloadGrace)
	pa.ssrc++
	pa.seq = 7
	exchange(t, la, lb, pa, pb, offloadAfter+5)
	waitFor(t, "both directions back in the kernel", func() bool { return directions(e) == 2 })
	want += offloadAfter + 5 + 1 // and the event
	if st := la.Stats(); st.PacketsIn != want || st.PacketsLost != 2 {
		t.Errorf("after a new SSRC: in %d lost %d, want %d and 2", st.PacketsIn, st.PacketsLost, want)
	}

	// A recording's tap takes both directions back.
	var tapped atomic.Int32
	la.AddInTap(TapFunc(func(*Packet) { tapped.Add(1) }))
	if n := directions(e); n != 0 {
		t.Fatalf("%d directions left in the kernel with a tap on the caller", n)
	}
	exchange(t, la, lb, pa, pb, 5)
	if n := tapped.Load(); n != 5 {
		t.Errorf("the tap saw %d of 5 packets", n)
	}
	want += 5
	s.Close()
	if tot := e.Totals(); tot.PacketsIn != 2*want-1 || tot.PacketsOut != 2*want-1 || tot.PacketsLost != 2 {
		t.Errorf("totals: in %d out %d lost %d, want %d, %d, 2", tot.PacketsIn, tot.PacketsOut, tot.PacketsLost, 2*want-1, 2*want-1)
	}
}
