package rtpcore

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"pbx/rtpcore/sdp"
)

// rtcpRR is a minimal receiver report: V=2, RC=0, PT=201, length 1.
func rtcpRR(ssrc byte) []byte {
	return []byte{0x80, 201, 0, 1, 0, 0, 0, ssrc}
}

func TestRTCPRelay(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, lb, pa, pb := bridgedPair(t, e)
	ra, rb := newPhone(t), newPhone(t) // the phones' RTCP sockets
	la.SetRTCPRemote(ra.addr())
	lb.SetRTCPRemote(rb.addr())
	rtcpOf := func(l *Leg) netip.AddrPort { return netip.AddrPortFrom(loopback, uint16(l.Port()+1)) }

	ra.sendTo(rtcpOf(la), rtcpRR(1))
	got, from := rb.recv(5 * time.Second)
	if !bytes.Equal(got, rtcpRR(1)) || from != rtcpOf(lb) {
		t.Fatalf("RTCP A->B: %x from %v", got, from)
	}
	rb.sendTo(rtcpOf(lb), rtcpRR(2))
	got, from = ra.recv(5 * time.Second)
	if !bytes.Equal(got, rtcpRR(2)) || from != rtcpOf(la) {
		t.Fatalf("RTCP B->A: %x from %v", got, from)
	}
	// Not RTCP: dropped.
	ra.sendTo(rtcpOf(la), pa.packet(PayloadPCMA, 10))
	// A stranger on another host: dropped once latched.
	stranger, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatalf("bind 127.0.0.2: %v", err)
	}
	defer stranger.Close()
	stranger.WriteToUDPAddrPort(rtcpRR(9), rtcpOf(la))
	waitFor(t, "rtcp drops", func() bool { return la.Stats().RTCPDropped == 2 })
	if got, _ := rb.recv(200 * time.Millisecond); got != nil {
		t.Fatalf("dropped RTCP relayed: %x", got)
	}
	st := la.Stats()
	if st.RTCPIn != 1 || st.RTCPOut != 1 || st.RTCPRemote != ra.addr() {
		t.Errorf("stats %+v", st)
	}
	// RTCP does not count as RTP.
	if st.PacketsIn != 0 {
		t.Errorf("PacketsIn %d", st.PacketsIn)
	}
	_ = pb
}

func TestRTCPDefaultPortAndLatch(t *testing.T) {
	e := newEngine(t, Options{})
	s, _ := e.NewSession(SessionOptions{})
	la, _ := s.NewLeg("a")
	la.SetRemote(netip.MustParseAddrPort("192.0.2.1:5000"))
	if la.RTCPRemote() != netip.MustParseAddrPort("192.0.2.1:5001") {
		t.Errorf("default RTCP remote %v", la.RTCPRemote())
	}
	la.SetRTCPRemote(netip.MustParseAddrPort("192.0.2.1:6000"))
	if la.RTCPRemote() != netip.MustParseAddrPort("192.0.2.1:6000") {
		t.Errorf("a=rtcp remote %v", la.RTCPRemote())
	}
	// The first RTCP packet latches, as for RTP.
	ph := newPhone(t)
	ph.sendTo(netip.AddrPortFrom(loopback, uint16(la.Port()+1)), rtcpRR(1))
	waitFor(t, "rtcp latch", func() bool { return la.RTCPRemote() == ph.addr() })
	// The odd port is really bound.
	if _, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: la.Port() + 1}); err == nil {
		t.Error("RTCP port not bound")
	}
	rtcpPort := la.Port() + 1
	la.Close()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: rtcpPort})
	if err != nil {
		t.Fatalf("RTCP port still bound after close: %v", err)
	}
	c.Close()
}

func TestNoRTCP(t *testing.T) {
	e := newEngine(t, Options{NoRTCP: true})
	s, _ := e.NewSession(SessionOptions{})
	la, _ := s.NewLeg("a")
	la.SetRemote(netip.MustParseAddrPort("192.0.2.1:5000"))
	if la.RTCPRemote().IsValid() {
		t.Errorf("RTCP remote %v with RTCP off", la.RTCPRemote())
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: la.Port() + 1})
	if err != nil {
		t.Fatalf("odd port bound with RTCP off: %v", err)
	}
	c.Close()
}

func TestPortPoolPairSkipsBusyRTCPPort(t *testing.T) {
	lo, hi := freeRange(t, 2)
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: lo + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p, _ := NewPortPool(PortPoolOptions{Min: lo, Max: hi, BindIP: loopback}, nil)
	rtp, rtcp, err := p.AllocatePair()
	if err != nil {
		t.Fatal(err)
	}
	if rtp.LocalAddr().(*net.UDPAddr).Port != lo+2 || rtcp.LocalAddr().(*net.UDPAddr).Port != lo+3 {
		t.Errorf("pair %v %v", rtp.LocalAddr(), rtcp.LocalAddr())
	}
	// The RTP port of the busy pair was released again, not leaked.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: lo})
	if err != nil {
		t.Errorf("RTP port of a failed pair left bound: %v", err)
	} else {
		c.Close()
	}
	if _, _, err := p.AllocatePair(); !errors.Is(err, ErrPortsExhausted) {
		t.Errorf("second pair: %v", err)
	}
	p.Release(rtcp)
	p.Release(rtp)
	if p.InUse() != 0 {
		t.Errorf("in use %d", p.InUse())
	}
}

func TestApplySDP(t *testing.T) {
	e := newEngine(t, Options{})
	s, _ := e.NewSession(SessionOptions{})
	l, _ := s.NewLeg("caller")
	d, err := sdp.Parse([]byte("v=0\r\nc=IN IP4 192.0.2.7\r\nm=audio 7000 RTP/AVP 8 96\r\na=rtpmap:96 telephone-event/8000\r\na=rtcp:7005\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	l.ApplySDP(d)
	if l.Remote() != netip.MustParseAddrPort("192.0.2.7:7000") || l.RTCPRemote() != netip.MustParseAddrPort("192.0.2.7:7005") || l.TelephoneEventPT() != 96 {
		t.Errorf("remote %v rtcp %v te %d", l.Remote(), l.RTCPRemote(), l.TelephoneEventPT())
	}
	plain, _ := sdp.Parse([]byte("v=0\r\nc=IN IP4 192.0.2.8\r\nm=audio 8000 RTP/AVP 0\r\n"))
	l.ApplySDP(plain)
	if l.Remote() != netip.MustParseAddrPort("192.0.2.8:8000") || l.RTCPRemote() != netip.MustParseAddrPort("192.0.2.8:8001") || l.TelephoneEventPT() != -1 {
		t.Errorf("remote %v rtcp %v te %d", l.Remote(), l.RTCPRemote(), l.TelephoneEventPT())
	}
	l.ApplySDP(nil) // no effect
	if l.Remote() != netip.MustParseAddrPort("192.0.2.8:8000") {
		t.Error("nil description changed the remote")
	}
}
