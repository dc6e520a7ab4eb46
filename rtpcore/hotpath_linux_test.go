package rtpcore

import (
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestLegTargetSockaddr proves that the kernel address a leg's target
// carries, built once per target rather than per packet, is the target's
// address for the socket's family, through the SDP address, latching and
// re-latching; and that a target the socket cannot reach is counted as a
// send error, not sent.
func TestLegTargetSockaddr(t *testing.T) {
	check := func(t *testing.T, l *Leg, want netip.AddrPort) {
		t.Helper()
		d := l.target.Load()
		if d == nil || d.ap != want {
			t.Fatalf("target %v, want %v", d, want)
		}
		var any unix.RawSockaddrAny
		*(*unix.RawSockaddrInet6)(unsafe.Pointer(&any)) = d.raw.sa
		got := sockaddrPort(&any)
		if got.Port() != want.Port() || got.Addr().Unmap() != want.Addr().Unmap() {
			t.Fatalf("kernel address %v for target %v", got, want)
		}
	}
	for _, bind := range []netip.Addr{loopback, netip.IPv6Unspecified()} {
		t.Run(bind.String(), func(t *testing.T) {
			e := newEngine(t, Options{BindIP: bind, RelatchPackets: 2, RelatchSilence: 20 * time.Millisecond})
			_, la, lb, pa, pb := bridgedPair(t, e)
			to := netip.AddrPortFrom(loopback, uint16(la.Port()))
			check(t, la, pa.addr())
			moved := newPhone(t)
			moved.sendTo(to, moved.packet(PayloadPCMA, 160)) // latches
			waitFor(t, "latch", func() bool { return la.Remote() == moved.addr() })
			check(t, la, moved.addr())
			rebound := newPhone(t)
			tick := time.NewTicker(5 * time.Millisecond) // a phone's pace
			defer tick.Stop()
			deadline := time.Now().Add(10 * time.Second)
			for la.Remote() != rebound.addr() {
				if time.Now().After(deadline) {
					t.Fatal("did not re-latch")
				}
				rebound.sendTo(to, rebound.packet(PayloadPCMA, 160))
				<-tick.C
			}
			check(t, la, rebound.addr())
			pb.sendTo(netip.AddrPortFrom(loopback, uint16(lb.Port())), pb.packet(PayloadPCMA, 160))
			if got, _ := rebound.recv(5 * time.Second); got == nil {
				t.Fatal("not sent to the re-latched address")
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		e := newEngine(t, Options{})
		_, la, lb, _, pb := bridgedPair(t, e)
		la.SetRemote(netip.MustParseAddrPort("[2001:db8::1]:4000")) // an IPv4 socket
		pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
		waitFor(t, "send error", func() bool { return la.Stats().SendErrors == 1 })
		if st := la.Stats(); st.PacketsOut != 0 {
			t.Errorf("%d packets out to an address the socket cannot reach", st.PacketsOut)
		}
	})
}

// TestCloseWaitsForBatch proves that a batch that finds a socket closing
// leaves it alone (its datagram neither read nor relayed), and that
// closing a leg waits for the batch in progress of the worker that relays
// it, which no longer counts the sockets it uses one by one.
func TestCloseWaitsForBatch(t *testing.T) {
	e := newEngine(t, Options{NoRTCP: true})
	_, la, lb, pa, pb := bridgedPair(t, e)
	w := testWorker(t, e, la, lb)
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	waitFor(t, "the datagram ready", func() bool {
		n, _ := epollWait(w.epfd, w.events, 0)
		return n == 1
	})
	n, err := epollWait(w.epfd, w.events, 0)
	if err != nil || n != 1 {
		t.Fatalf("%d ready, %v", n, err)
	}
	events := append([]unix.EpollEvent(nil), w.events[:n]...)

	// A batch that finds the socket closing (its event taken before the
	// close began) leaves it alone.
	la.conn.refs.Add(sockClosed)
	w.serve(events, time.Now())
	la.conn.refs.Add(-sockClosed)
	if got, _ := pb.recv(100 * time.Millisecond); got != nil {
		t.Fatal("a batch relayed a packet of a closing leg")
	}
	if st := la.Stats(); st.PacketsIn != 0 {
		t.Errorf("a batch read %d packets of a closing leg", st.PacketsIn)
	}

	w.batch.Add(1) // a batch in progress
	closed := make(chan struct{})
	go func() {
		la.Close()
		close(closed)
	}()
	waitFor(t, "the close to begin", la.conn.closing)
	select {
	case <-closed:
		t.Fatal("the leg closed during its worker's batch")
	case <-time.After(50 * time.Millisecond):
	}
	w.batch.Add(1) // the batch ends
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close still waiting after the batch ended")
	}
}
