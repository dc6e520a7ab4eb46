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

// loopTo is the leg's port on 127.0.0.1, whatever address it is bound to.
func loopTo(l *Leg) netip.AddrPort { return netip.AddrPortFrom(loopback, uint16(l.Port())) }

// relayedFrom sends one packet from ph to leg in and returns the source
// address of the copy phone out receives (from leg out).
func relayedFrom(t *testing.T, ph *phone, in *Leg, out *phone) netip.AddrPort {
	t.Helper()
	ph.sendTo(loopTo(in), ph.packet(PayloadPCMA, 160))
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
// the port. The wildcard address binds dual-stack IPv6 sockets, connected
// to IPv4-mapped addresses.
func TestConnectedTwin(t *testing.T) {
	for _, bind := range []netip.Addr{loopback, netip.IPv4Unspecified()} {
		t.Run(bind.String(), func(t *testing.T) { testConnectedTwin(t, bind) })
	}
}

func testConnectedTwin(t *testing.T, bind netip.Addr) {
	e := newEngine(t, Options{BindIP: bind, RelatchPackets: 3, RelatchSilence: 200 * time.Millisecond})
	_, la, lb, pa, pb := bridgedPair(t, e)

	// Each side latches; b's packets to pa leave from la's twin, from la's port.
	relayedFrom(t, pa, la, pb)
	waitFor(t, "twin of a", func() bool { return twinPeer(la) == pa.addr() })
	if from := relayedFrom(t, pb, lb, pa); from != loopTo(la) {
		t.Fatalf("relayed from %v, want the leg's port %v", from, loopTo(la))
	}
	waitFor(t, "twin of b", func() bool { return twinPeer(lb) == pb.addr() })
	if from := relayedFrom(t, pa, la, pb); from != loopTo(lb) {
		t.Fatalf("relayed from %v, want the leg's port %v", from, loopTo(lb))
	}
	in := la.Stats().PacketsIn

	// A stranger reaches the unconnected socket and is counted, not relayed.
	stray := newPhone(t)
	for range 2 {
		stray.sendTo(loopTo(la), stray.packet(PayloadPCMA, 160))
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
		rebound.sendTo(loopTo(la), rebound.packet(PayloadPCMA, 160))
		<-tick.C
	}
	waitFor(t, "twin follows", func() bool { return twinPeer(la) == rebound.addr() })
	pb.sendTo(loopTo(lb), pb.packet(PayloadPCMA, 160))
	if got, from := rebound.recv(5 * time.Second); got == nil || from != loopTo(la) {
		t.Fatalf("after re-latching: got %d bytes from %v", len(got), from)
	}
	// The old source is a stranger now, whichever socket it reaches.
	strays := la.Stats().Strays
	pa.sendTo(loopTo(la), pa.packet(PayloadPCMA, 160))
	waitFor(t, "old source stray", func() bool { return la.Stats().Strays == strays+1 })

	// Closing the leg closes both sockets: the port binds again.
	port := la.LocalAddr()
	la.Close()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(port))
	if err != nil {
		t.Fatalf("port still held after close: %v", err)
	}
	c.Close()
}
