package rtpcore

import (
	"sync"
	"testing"
	"time"
)

// TestEventTapSeesOnlyTelephoneEvents proves that a tap attached with
// AddEventTap is shown the telephone events of the leg's payload type
// received from the far end and nothing else: not audio, not events while
// the leg's type is unknown, not packets sent; and that detaching it
// leaves the leg without taps.
func TestEventTapSeesOnlyTelephoneEvents(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	var mu sync.Mutex
	seen := map[uint8]int{}
	var dirs []Direction
	remove := la.AddEventTap(TapFunc(func(p *Packet) {
		mu.Lock()
		seen[p.Header.PayloadType]++
		dirs = append(dirs, p.Dir)
		mu.Unlock()
	}))
	if la.taps.Load() != nil || la.outTaps.Load() != nil || la.eventTaps.Load() == nil {
		t.Fatal("an event tap is listed among the taps of every packet")
	}
	relay := func(p *phone, l *Leg, other *phone, pt uint8) {
		t.Helper()
		p.sendTo(legTo(l), p.packet(pt, 4))
		if got, _ := other.recv(5 * time.Second); got == nil {
			t.Fatalf("packet of type %d not relayed", pt)
		}
	}
	// The leg's type unknown: an event is not shown.
	relay(pa, la, pb, 101)
	la.SetTelephoneEventPT(101)
	for range 3 {
		relay(pa, la, pb, PayloadPCMA)
		relay(pa, la, pb, 101)
		relay(pa, la, pb, 96)  // another dynamic type
		relay(pb, lb, pa, 101) // sent toward la's far end: Out
	}
	mu.Lock()
	if seen[101] != 3 || len(seen) != 1 {
		t.Errorf("event tap saw %v, want 3 packets of type 101", seen)
	}
	for _, d := range dirs {
		if d != In {
			t.Errorf("event tap shown a packet going %v", d)
		}
	}
	mu.Unlock()
	// With a tap of every packet beside it, both see what they should.
	var all int
	removeAll := la.AddInTap(TapFunc(func(*Packet) { mu.Lock(); all++; mu.Unlock() }))
	relay(pa, la, pb, PayloadPCMA)
	relay(pa, la, pb, 101)
	mu.Lock()
	if all != 2 || seen[101] != 4 {
		t.Errorf("with an In tap: it saw %d of 2, the event tap %d events of 4", all, seen[101])
	}
	mu.Unlock()
	removeAll()
	remove()
	if la.taps.Load() != nil || la.eventTaps.Load() != nil || la.outTaps.Load() != nil || len(la.allTaps) != 0 {
		t.Error("taps not detached")
	}
}

// TestDTMFEventTapOnLeg is TestDTMFTapOnLeg with the detector attached
// as an event tap, as the B2BUA attaches it.
func TestDTMFEventTapOnLeg(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, _, pa, pb := bridgedPair(t, e)
	la.SetTelephoneEventPT(101)
	digits := make(chan rune, 16)
	la.AddEventTap(NewDTMFTap(101, func(d rune, at time.Time) { digits <- d }))
	pkts := dtmfStream(t, 101, pa.ssrc, "1#", 4000)
	for _, pkt := range pkts {
		pa.sendTo(legTo(la), pkt)
		pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160)) // audio between
	}
	for range 2 * len(pkts) {
		if got, _ := pb.recv(5 * time.Second); got == nil {
			t.Fatal("packets not relayed")
		}
	}
	var got []rune
	for len(got) < 2 {
		select {
		case d := <-digits:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("digits %q", string(got))
		}
	}
	if string(got) != "1#" {
		t.Errorf("digits %q", string(got))
	}
}

// TestSessionLastPacketOutlivesLeg proves that the session's last packet
// time, which each leg now keeps for itself, is the latest over its legs
// and survives the leg that received it closing.
func TestSessionLastPacketOutlivesLeg(t *testing.T) {
	e := newEngine(t, Options{})
	s, la, lb, pa, pb := bridgedPair(t, e)
	created := s.LastPacket()
	if !la.Stats().LastPacket.IsZero() {
		t.Fatal("last packet before any packet")
	}
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	if got, _ := pb.recv(5 * time.Second); got == nil {
		t.Fatal("not relayed")
	}
	at := la.Stats().LastPacket
	if !at.After(created) || !s.LastPacket().Equal(at) {
		t.Fatalf("leg's last packet %v, session's %v, created %v", at, s.LastPacket(), created)
	}
	if idle := s.Idle(); idle < 0 || idle > time.Since(at)+time.Millisecond {
		t.Errorf("idle %v, %v since the packet", idle, time.Since(at))
	}
	la.Close()
	if !s.LastPacket().Equal(at) {
		t.Errorf("after the leg closed the session's last packet is %v, want %v", s.LastPacket(), at)
	}
	if !lb.Stats().LastPacket.IsZero() {
		t.Error("the leg that received nothing has a last packet")
	}
}

// BenchmarkLegReceive is the Go work of one received packet on a leg with
// no peer, without the system calls: parsing, latching, the receive
// statistics and the taps. taps=event is a DTMF detector attached with
// AddEventTap, as the B2BUA attaches one to both legs of every call:
// audio must cost it no more than taps=none (issue 16); taps=in is the
// same detector attached with AddInTap, shown every packet.
func BenchmarkLegReceive(b *testing.B) {
	for _, taps := range []string{"none", "event", "in"} {
		b.Run("taps="+taps, func(b *testing.B) {
			e := newEngine(b, Options{})
			s, err := e.NewSession(SessionOptions{ID: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			l, err := s.NewLeg("a")
			if err != nil {
				b.Fatal(err)
			}
			l.SetTelephoneEventPT(101)
			det := NewDTMFTap(101, func(rune, time.Time) {})
			switch taps {
			case "event":
				l.AddEventTap(det)
			case "in":
				l.AddInTap(det)
			}
			ph := newPhone(b)
			pkt := ph.packet(PayloadPCMA, 160)
			src := ph.addr()
			now := time.Now()
			for b.Loop() {
				pkt[3]++ // the sequence number's low byte
				l.handle(pkt, src, now)
			}
		})
	}
}
