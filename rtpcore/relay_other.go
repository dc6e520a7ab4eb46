//go:build !linux

package rtpcore

import (
	"errors"
	"net"
	"net/netip"
	"time"
)

// Outside Linux the relay is one goroutine per socket blocking in
// ReadFromUDP, woken by the Go runtime's poller.

// engineIO holds no state on this platform.
type engineIO struct{}

// sock is one of a leg's UDP sockets.
type sock struct {
	c     *net.UDPConn
	local netip.AddrPort
	done  chan struct{} // closed when the reader returns
}

func newSock(c *net.UDPConn) *sock {
	return &sock{c: c, local: c.LocalAddr().(*net.UDPAddr).AddrPort(), done: make(chan struct{})}
}

// openSocks binds a leg's RTP socket and, when the engine relays RTCP,
// the RTCP socket on the port above.
func (e *Engine) openSocks() (rtp, rtcp *sock, err error) {
	if !e.rtcp {
		c, err := e.pool.Allocate()
		if err != nil {
			return nil, nil, err
		}
		return newSock(c), nil, nil
	}
	c, r, err := e.pool.AllocatePair()
	if err != nil {
		return nil, nil, err
	}
	return newSock(c), newSock(r), nil
}

// closeSocks releases sockets that were never started.
func (e *Engine) closeSocks(rtp, rtcp *sock) {
	if rtcp != nil {
		e.pool.Release(rtcp.c)
	}
	e.pool.Release(rtp.c)
}

// stopIO has nothing to stop: readers end with their legs.
func (e *Engine) stopIO() {}

// startIO starts the leg's readers.
func (l *Leg) startIO() error {
	go l.readLoop()
	if l.rtcp != nil {
		go l.rtcpLoop()
	}
	return nil
}

// stopIO closes the leg's sockets, waits for its readers and releases its
// port into quarantine.
func (l *Leg) stopIO() {
	if l.rtcp != nil {
		l.sess.e.pool.Release(l.rtcp.c)
		<-l.rtcp.done
	}
	l.sess.e.pool.Release(l.conn.c)
	<-l.conn.done
}

// sendTo writes one datagram to addr.
func (s *sock) sendTo(b []byte, addr netip.AddrPort) error {
	_, err := s.c.WriteToUDPAddrPort(b, addr)
	return err
}

// rawDest is a destination for sendRaw; on Linux it holds the kernel's
// form of the address, built once per target.
type rawDest struct{ ap netip.AddrPort }

func (s *sock) rawDest(addr netip.AddrPort) rawDest { return rawDest{addr} }

// sendRaw is sendTo to a destination built by rawDest.
func (s *sock) sendRaw(b []byte, d *rawDest) error { return s.sendTo(b, d.ap) }

// sendInBatch is sendRaw from the leg's reader.
func (s *sock) sendInBatch(b []byte, d *rawDest) error { return s.sendTo(b, d.ap) }

// readLoop is the RTP socket's only reader.
func (l *Leg) readLoop() {
	l.readSock(l.conn, func(b []byte, src netip.AddrPort) { l.handle(b, src, time.Now()) })
}

// rtcpLoop is the RTCP socket's only reader.
func (l *Leg) rtcpLoop() { l.readSock(l.rtcp, l.handleRTCP) }

// readSock reads s until it is closed, handing each datagram to handle; the
// buffer is reused for every packet.
func (l *Leg) readSock(s *sock, handle func(b []byte, src netip.AddrPort)) {
	defer close(s.done)
	buf := make([]byte, maxPacket)
	errs := 0
	for {
		n, src, err := s.c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.closing.Load() {
				return
			}
			// Transient errors (an ICMP error reported on read) must not
			// end the leg, nor spin if they repeat.
			errs++
			if errs > 10 {
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		errs = 0
		handle(buf[:n], src)
	}
}
