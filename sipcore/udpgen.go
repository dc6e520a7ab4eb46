package sipcore

import (
	"net"
	"net/netip"
	"time"

	"github.com/emiago/sipgo/sip"
)

// udpGen is one generation of sipgo's UDP reader: a net.PacketConn whose
// reads come from the listener's queue and whose writes go out of the
// listening socket. See the comment at the top of udp.go.
type udpGen struct {
	u       *udpListener
	retired chan struct{}
	last    netip.AddrPort // only touched by sipgo's single reader
	changes int
}

// startGeneration serves a new generation through sipgo and returns once
// sipgo's pool maps the listener address to it, so the PBX's own requests
// find the listening socket at every moment.
func (u *udpListener) startGeneration() {
	g := &udpGen{u: u, retired: make(chan struct{})}
	u.gens.Add(1)
	go func() {
		defer u.gens.Done()
		if err := u.s.srv.ServeUDP(g); err != nil {
			u.s.log.Warn("udp generation", "listener", u.laddr, "err", err)
		}
	}()
	pool := u.s.ua.TransportLayer().Pool(TransportUDP)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !u.installed(pool, g) {
		select {
		case <-u.closed:
			return
		case <-t.C:
		}
	}
}

// installed reports whether pool maps the listener address to g.
func (u *udpListener) installed(pool *sip.ConnectionPool, g *udpGen) bool {
	c := pool.Get(u.laddr)
	if c == nil {
		return false
	}
	c.Ref(-1) // undo Get's reference; see Server.ConnectionOpen
	uc, ok := c.(*sip.UDPConnection)
	return ok && uc.PacketConn == g
}

// ReadFrom returns the next queued datagram. A retired generation returns
// net.ErrClosed after udpRetireGrace, which makes sipgo forget the
// addresses it learnt through it.
func (g *udpGen) ReadFrom(p []byte) (int, net.Addr, error) {
	select {
	case <-g.u.closed:
		return 0, nil, net.ErrClosed
	case <-g.retired:
		t := time.NewTimer(udpRetireGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-g.u.closed:
		}
		return 0, nil, net.ErrClosed
	case pkt := <-g.u.queue:
		// sipgo adds an address to its pool and its own map when the
		// source differs from the previous datagram's.
		if pkt.src != g.last {
			g.last = pkt.src
			g.changes++
			if g.changes >= udpGenerationSources {
				g.u.startGeneration()
				close(g.retired)
			}
		}
		return copy(p, pkt.data), net.UDPAddrFromAddrPort(pkt.src), nil
	}
}

// WriteTo sends through the listening socket.
func (g *udpGen) WriteTo(p []byte, addr net.Addr) (int, error) { return g.u.conn.WriteTo(p, addr) }

// Close does nothing: the Server owns the socket.
func (g *udpGen) Close() error { return nil }

// LocalAddr is the listening socket's address.
func (g *udpGen) LocalAddr() net.Addr { return g.u.conn.LocalAddr() }

// SetDeadline is not supported; sipgo does not use it on UDP.
func (g *udpGen) SetDeadline(time.Time) error { return nil }

// SetReadDeadline is not supported.
func (g *udpGen) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline is not supported.
func (g *udpGen) SetWriteDeadline(time.Time) error { return nil }
