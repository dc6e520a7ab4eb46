//go:build linux

package rtpcore

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// twinPeer is where the leg's connected twin sends, invalid without one.
func twinPeer(l *Leg) netip.AddrPort {
	if tw := l.conn.twin.Load(); tw != nil {
		if p := tw.peer.Load(); p != nil {
			return *p
		}
	}
	return netip.AddrPort{}
}

// relayedFrom sends one packet from ph to leg in and returns the source
// address of the copy phone out receives (from leg out).
func relayedFrom(t *testing.T, ph *phone, in *Leg, out *phone) netip.AddrPort {
	t.Helper()
	ph.sendTo(legTo(in), ph.packet(PayloadPCMA, 160))
	got, from := out.recv(5 * time.Second)
	if got == nil {
		t.Fatal("packet not relayed")
	}
	return from
}

// TestConnectedTwin proves that a latched leg sends from a socket
// connected to its far end, on the leg's own port, and that latching is
// unchanged by it: strangers still reach the leg (and are counted), a
// rebinding re-latches and the twin follows, and closing the leg frees
// the port.
func TestConnectedTwin(t *testing.T) {
	e := newEngine(t, Options{RelatchPackets: 3, RelatchSilence: 200 * time.Millisecond})
	_, la, lb, pa, pb := bridgedPair(t, e)

	// Each side latches; b's packets to pa leave from la's twin, from la's port.
	relayedFrom(t, pa, la, pb)
	waitFor(t, "twin of a", func() bool { return twinPeer(la) == pa.addr() })
	if from := relayedFrom(t, pb, lb, pa); from != legTo(la) {
		t.Fatalf("relayed from %v, want the leg's port %v", from, legTo(la))
	}
	waitFor(t, "twin of b", func() bool { return twinPeer(lb) == pb.addr() })
	if from := relayedFrom(t, pa, la, pb); from != legTo(lb) {
		t.Fatalf("relayed from %v, want the leg's port %v", from, legTo(lb))
	}
	in := la.Stats().PacketsIn

	// A stranger reaches the unconnected socket and is counted, not relayed.
	stray := newPhone(t)
	for range 2 {
		stray.sendTo(legTo(la), stray.packet(PayloadPCMA, 160))
	}
	waitFor(t, "strays", func() bool { return la.Stats().Strays == 2 })
	if got, _ := pb.recv(100 * time.Millisecond); got != nil {
		t.Fatal("stray packet relayed")
	}
	if la.Stats().PacketsIn != in {
		t.Error("stray packets counted as the far end's")
	}

	// A NAT rebinding: the old source falls silent, the new one re-latches
	// the leg, and the twin follows it.
	rebound := newPhone(t)
	tick := time.NewTicker(20 * time.Millisecond) // a phone's packet interval
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for la.Remote() != rebound.addr() {
		if time.Now().After(deadline) {
			t.Fatal("did not re-latch after a rebinding")
		}
		rebound.sendTo(legTo(la), rebound.packet(PayloadPCMA, 160))
		<-tick.C
	}
	waitFor(t, "twin follows", func() bool { return twinPeer(la) == rebound.addr() })
	pb.sendTo(legTo(lb), pb.packet(PayloadPCMA, 160))
	if got, from := rebound.recv(5 * time.Second); got == nil || from != legTo(la) {
		t.Fatalf("after re-latching: got %d bytes from %v", len(got), from)
	}
	// The old source is a stranger now, whichever socket it reaches.
	strays := la.Stats().Strays
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	waitFor(t, "old source stray", func() bool { return la.Stats().Strays == strays+1 })

	// Closing the leg closes both sockets: the port binds again.
	port := legTo(la)
	la.Close()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(port))
	if err != nil {
		t.Fatalf("port still held after close: %v", err)
	}
	c.Close()
}
