//go:build linux

package rtpcore

import (
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Once a leg has latched, its RTP socket gets a twin: a second socket
// bound to the same port (SO_REUSEPORT) and connected to the latched
// source. The kernel delivers that source's datagrams to the connected
// twin and everyone else's to the unconnected socket, so latching works
// as before (strangers are counted, a NAT rebinding re-latches), while
// the relay's sends to the far end go through the twin without a
// destination: the kernel keeps the route cached on a connected socket
// instead of looking it up for every datagram, and on a real interface
// the far end's packets are found by early demultiplexing. Both sockets
// are in the leg's worker's epoll set and handled alike. Re-latching
// reconnects the twin; a new SDP address is sent to from the unconnected
// socket until packets latch it. The RTCP socket (a packet every few
// seconds) has no twin.

// follow connects s's twin to addr, the leg's latched source, creating
// the twin on first use. It is called by the leg's worker for every
// packet accepted and returns at once when the twin already follows
// addr. A twin that cannot be made leaves the leg on its one socket.
func (s *sock) follow(addr netip.AddrPort) {
	if s.twinFor == addr || s.rtcp || s.w == nil || !s.acquire() {
		return
	}
	defer s.release()
	s.twinFor = addr
	tw := s.twin.Load()
	if tw == nil {
		var err error
		if tw, err = s.openTwin(); err != nil {
			s.w.log.Debug("rtp twin socket", "port", s.local.Port(), "err", err)
			return
		}
		s.twin.Store(tw)
	}
	tw.peer.Store(nil) // sends go through s until the twin is connected
	if !tw.acquire() {
		return
	}
	defer tw.release()
	var sa unix.Sockaddr
	if tw.v6 {
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16(), ZoneId: zoneID(addr.Addr().Zone())}
	} else if a := addr.Addr().Unmap(); a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: a.As4()}
	} else {
		return
	}
	if err := unix.Connect(tw.fd, sa); err != nil {
		s.w.log.Debug("rtp twin connect", "port", s.local.Port(), "remote", addr.String(), "err", err)
		return
	}
	a := addr // a copy, so that addr does not escape on the early returns
	tw.peer.Store(&a)
}

// openTwin binds a second socket to s's port and registers it with s's
// worker.
func (s *sock) openTwin() (*sock, error) {
	if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return nil, err
	}
	family := unix.AF_INET
	if s.v6 {
		family = unix.AF_INET6
	}
	tw, err := bindUDPOpt(family, s.local.Addr(), int(s.local.Port()), true)
	if err != nil {
		return nil, err
	}
	tw.leg, tw.w = s.leg, s.w
	if err := s.w.add(tw); err != nil {
		tw.w = nil
		tw.close()
		return nil, err
	}
	return tw, nil
}

// send writes one datagram to the twin's peer without waiting. An ICMP
// error from an earlier datagram (the far end's port closed for a moment)
// fails one send on a connected socket and is then cleared; the datagram
// is sent again, as the unconnected socket would have sent it.
func (s *sock) send(b []byte) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.release()
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	refused := false
	for {
		_, _, e := rawCall(unix.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.ECONNREFUSED && !refused:
			refused = true
			continue
		case e != 0:
			return e
		}
		return nil
	}
}

// closeTwin closes s's twin, if any, once s is closed (so that no new
// twin can appear).
func (s *sock) closeTwin() {
	if tw := s.twin.Load(); tw != nil {
		tw.close()
	}
}
