package sipcore

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// udpGen is one generation of sipgo's UDP reader: a net.PacketConn whose
// reads come from the listener's queue and whose writes go out of the
// listening socket. See the comment at the top of udp.go.
type udpGen struct {
	u       *udpListener
	started chan struct{} // closed on sipgo's first read: the pool maps the listener to it
	once    sync.Once
	// Only touched by sipgo's single reader of this generation:
	last    netip.AddrPort
	changes int
	retire  bool // a successor took over; stop after udpRetireGrace
}

// startGeneration serves a new generation through sipgo and returns once
// sipgo's pool maps the listener address to it (sipgo adds it before its
// first read), so the PBX's own requests find the listening socket at every
// moment.
func (u *udpListener) startGeneration() {
	g := &udpGen{u: u, started: make(chan struct{})}
	u.gens.Add(1)
	go func() {
		defer u.gens.Done()
		if err := u.s.srv.ServeUDP(g); err != nil {
			u.s.log.Warn("udp generation", "listener", u.laddr, "err", err)
		}
		g.once.Do(func() { close(g.started) })
	}()
	select {
	case <-g.started:
	case <-u.closed:
	}
}

// ReadFrom returns the next queued datagram. A retired generation returns
// net.ErrClosed after udpRetireGrace, which makes sipgo forget the
// addresses it learnt through it.
func (g *udpGen) ReadFrom(p []byte) (int, net.Addr, error) {
	g.once.Do(func() { close(g.started) })
	if g.retire {
		t := time.NewTimer(udpRetireGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-g.u.closed:
		}
		return 0, nil, net.ErrClosed
	}
	select {
	case <-g.u.closed:
		return 0, nil, net.ErrClosed
	case pkt := <-g.u.queue:
		// sipgo adds an address to its pool and its own map when the
		// source differs from the previous datagram's.
		if pkt.src != g.last {
			g.last = pkt.src
			g.changes++
			if g.changes >= udpGenerationSources {
				g.u.startGeneration()
				g.retire = true
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
