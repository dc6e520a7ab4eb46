package rtpcore

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testWorker takes the legs' RTP sockets from the engine's workers into
// a worker of the test's own that nothing runs: the test drives its
// rounds (epoll_wait, serve) one at a time. The worker is closed after
// the engine, which closes the legs.
func testWorker(t *testing.T, e *Engine, legs ...*Leg) *worker {
	t.Helper()
	w, err := newWorker(e.log, e.priority)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		w.close()
	})
	for _, l := range legs {
		l.conn.w.remove(l.conn)
		l.conn.w = w
		if err := w.add(l.conn); err != nil {
			t.Fatal(err)
		}
	}
	// A round with nothing ready: no socket was ready in the round
	// before the test's first.
	w.serve(nil, time.Now())
	return w
}

// round is one pass of a worker's loop: the ready sockets, each served.
func (w *worker) round(t *testing.T) int {
	t.Helper()
	n, err := epollWait(w.epfd, w.events, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.serve(w.events[:n], time.Now())
	return n
}

// TestRelayServesBacklogInRound proves that a socket with several
// datagrams queued is served for them in two rounds (one datagram in the
// first, as for every socket not ready in the round before, the rest in
// the second), in order, beside legs holding one each: a worker reading
// one datagram per socket per round relays a leg that has fallen behind
// (a burst, a phone sending every 5 ms) no faster than a 20 ms leg, and
// its queue, the delay of its audio with it, grows without bound.
func TestRelayServesBacklogInRound(t *testing.T) {
	e := newEngine(t, Options{NoRTCP: true})
	pairs := bridgedPairs(t, e, 20)
	var legs []*Leg
	for _, p := range pairs {
		legs = append(legs, p.la, p.lb)
	}
	w := testWorker(t, e, legs...)

	const burst = 8
	var sent [][]byte
	for i := range burst {
		pkt := pairs[0].pa.packet(PayloadPCMA, 160)
		sent = append(sent, pkt)
		pairs[0].pa.sendTo(legTo(pairs[0].la), pkt)
		if i == burst/2 {
			for _, p := range pairs[1:] {
				p.pa.sendTo(legTo(p.la), p.pa.packet(PayloadPCMA, 160))
			}
		}
	}
	if n := w.round(t); n != len(pairs) {
		t.Fatalf("first round: %d sockets ready, want %d", n, len(pairs))
	}
	if got := pairs[0].la.Stats().PacketsIn; got != 1 {
		t.Errorf("first round read %d of the burst, want 1 (the socket was not behind yet)", got)
	}
	if n := w.round(t); n != 1 {
		t.Fatalf("second round: %d sockets ready, want the bursting one", n)
	}
	// The relay wrote synchronously to loopback: what it relayed in the
	// two rounds is queued at the phones already.
	for i, want := range sent {
		got, _ := pairs[0].pb.recv(100 * time.Millisecond)
		if got == nil {
			t.Fatalf("the burst's packet %d of %d not relayed in two rounds", i+1, burst)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the burst's packet %d relayed out of order: seq %d, want %d", i+1, got[2:4], want[2:4])
		}
	}
	for i, p := range pairs[1:] {
		if got, _ := p.pb.recv(100 * time.Millisecond); got == nil {
			t.Errorf("pair %d: its one packet not relayed", i+1)
		}
	}
	if st := pairs[0].la.Stats(); st.PacketsIn != burst {
		t.Errorf("bursting leg counted %d packets in, want %d", st.PacketsIn, burst)
	}
}

// TestRelayBoundsFloodPerRound proves that a socket flooded with more
// than rxBatchLen datagrams gets at most rxBatchLen relayed per round
// (one in the first, as it was not ready in the round before), so that it
// cannot hold up the worker's other sockets for its whole queue, and the
// rest in the next rounds, in order.
func TestRelayBoundsFloodPerRound(t *testing.T) {
	e := newEngine(t, Options{NoRTCP: true})
	_, la, lb, pa, pb := bridgedPair(t, e)
	w := testWorker(t, e, la, lb)
	var sent [][]byte
	for range 2*rxBatchLen + 1 {
		pkt := pa.packet(PayloadPCMA, 160)
		sent = append(sent, pkt)
		pa.sendTo(legTo(la), pkt)
	}
	for r := range 3 {
		w.round(t)
		if got := la.Stats().PacketsIn; got != uint64(1+r*rxBatchLen) {
			t.Fatalf("after round %d: %d packets taken, want %d", r+1, got, 1+r*rxBatchLen)
		}
	}
	for i, want := range sent {
		got, _ := pb.recv(100 * time.Millisecond)
		if !bytes.Equal(got, want) {
			t.Fatalf("packet %d of the flood missing or out of order", i+1)
		}
	}
}

// TestRelayServesBacklogInFullBatch proves that a socket reported in a
// full batch is read for what it has queued even though it was not ready
// in the round before: with more sockets ready than a batch holds, epoll
// reports each only every few rounds, and a socket that is behind would
// otherwise be read once per pass through them all.
func TestRelayServesBacklogInFullBatch(t *testing.T) {
	e := newEngine(t, Options{NoRTCP: true})
	_, la, lb, pa, pb := bridgedPair(t, e)
	w := testWorker(t, e, la, lb)
	const burst = 5
	for range burst {
		pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	}
	// The batch: the leg's socket and, standing for the other sockets
	// ready, events of slots that hold none (stale events).
	events := make([]unix.EpollEvent, maxEvents)
	for i := range events {
		events[i].Fd = 1 << 20
	}
	events[maxEvents/2].Fd = la.conn.slot
	w.serve(events, time.Now())
	if got := la.Stats().PacketsIn; got != burst {
		t.Fatalf("a full batch read %d of the socket's %d queued datagrams", got, burst)
	}
	for i := range burst {
		if got, _ := pb.recv(100 * time.Millisecond); got == nil {
			t.Fatalf("packet %d not relayed", i+1)
		}
	}
}

// BenchmarkRecvQueued is what reading one ready socket costs in the
// system calls alone, with queued datagrams (1: a 20 ms leg's usual case;
// 4: a leg behind) read one per call (recvfrom) or all at once (recvmmsg,
// vector of rxBatchLen): why rxBatch.read uses recvmmsg only for a socket
// that has fallen behind. Each op sends the datagrams, then reads them;
// ns/pkt is the read alone per datagram (the send is timed apart).
func BenchmarkRecvQueued(b *testing.B) {
	for _, queued := range []int{1, 4} {
		for _, one := range []bool{true, false} {
			name := map[bool]string{true: "recvfrom", false: "recvmmsg"}[one]
			b.Run(fmt.Sprintf("queued=%d/read=%s", queued, name), func(b *testing.B) {
				s, err := listenUDP(loopback, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer s.close()
				recv := s.recvBatch
				if one {
					recv = s.recvOne
				}
				tx, err := listenUDP(loopback, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer tx.close()
				pkt := make([]byte, HeaderLen+160)
				var rx rxBatch
				var sending time.Duration
				for b.Loop() {
					t0 := time.Now()
					for range queued {
						if err := tx.sendTo(pkt, s.local); err != nil {
							b.Fatal(err)
						}
					}
					sending += time.Since(t0)
					for got := 0; got < queued; {
						n, e := recv(&rx)
						if e != 0 {
							b.Fatal(e)
						}
						got += n
					}
				}
				b.ReportMetric(float64(b.Elapsed()-sending)/float64(b.N*queued), "ns/pkt")
			})
		}
	}
}
