package rtpcore

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// newEngine returns an engine on loopback with the default range.
func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	if !opts.BindIP.IsValid() {
		opts.BindIP = loopback
	}
	e, err := New(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// freeRange finds n even/odd port pairs in a row that are free right now,
// returning the inclusive range.
func freeRange(t testing.TB, n int) (int, int) {
	t.Helper()
	for try := 0; try < 50; try++ {
		base := 30000 + 2*rand.IntN(12000)
		ok := true
		var held []*net.UDPConn
		for p := base; p < base+2*n; p++ {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
			if err != nil {
				ok = false
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		if ok {
			return base, base + 2*n - 1
		}
	}
	t.Fatal("no free port range on loopback")
	return 0, 0
}

// phone is a test endpoint: a UDP socket on loopback sending and
// receiving RTP.
type phone struct {
	t    testing.TB
	conn *net.UDPConn
	ssrc uint32
	seq  uint16
	ts   uint32
}

func newPhone(t testing.TB) *phone {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &phone{t: t, conn: c, ssrc: rand.Uint32(), seq: uint16(rand.Uint32()), ts: rand.Uint32()}
}

func (p *phone) addr() netip.AddrPort { return p.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// packet builds the next packet with a payload of n bytes derived from
// the sequence number, and advances seq/ts.
func (p *phone) packet(pt uint8, n int) []byte {
	pkt := AppendHeader(make([]byte, 0, HeaderLen+n), false, pt, p.seq, p.ts, p.ssrc)
	for i := 0; i < n; i++ {
		pkt = append(pkt, byte(int(p.seq)+i))
	}
	p.seq++
	p.ts += uint32(n)
	return pkt
}

func (p *phone) sendTo(to netip.AddrPort, pkt []byte) {
	p.t.Helper()
	if _, err := p.conn.WriteToUDPAddrPort(pkt, to); err != nil {
		p.t.Fatal(err)
	}
}

// recvHeader reads one datagram, failing the test after 5 s without one,
// and returns its RTP header.
func (p *phone) recvHeader() Header {
	p.t.Helper()
	got, _ := p.recv(5 * time.Second)
	if got == nil {
		p.t.Fatal("packet missing")
	}
	h, err := ParseHeader(got)
	if err != nil {
		p.t.Fatal(err)
	}
	return h
}

// recv reads one datagram or returns nil after the timeout.
func (p *phone) recv(timeout time.Duration) ([]byte, netip.AddrPort) {
	p.t.Helper()
	buf := make([]byte, 2048)
	p.conn.SetReadDeadline(time.Now().Add(timeout))
	n, from, err := p.conn.ReadFromUDPAddrPort(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, netip.AddrPort{}
		}
		p.t.Fatal(err)
	}
	return buf[:n], from
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// legTo returns the leg's address on loopback (it is bound to 127.0.0.1).
func legTo(l *Leg) netip.AddrPort { return l.LocalAddr() }
