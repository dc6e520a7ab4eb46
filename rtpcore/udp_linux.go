package rtpcore

import (
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sock is one of a leg's UDP sockets: a non-blocking descriptor of its
// own, outside the Go runtime's poller, read by one relay worker and
// written by whoever relays or injects toward the leg.
type sock struct {
	fd    int
	local netip.AddrPort
	v6    bool // AF_INET6: IPv4 destinations are written v4-mapped

	// refs counts the calls using fd; closing adds sockClosed, after which
	// no new use starts, and the descriptor is closed once the count has
	// drained, so that a reused descriptor number is never written to.
	refs atomic.Int64

	leg  *Leg
	rtcp bool
	w    *worker
	slot int32 // index in w.socks while registered, guarded by w.mu
	reg  bool  // registered with w, guarded by w.mu
}

const sockClosed = 1 << 40

func (s *sock) acquire() bool {
	if s.refs.Add(1) >= sockClosed {
		s.refs.Add(-1)
		return false
	}
	return true
}

func (s *sock) release() { s.refs.Add(-1) }

// close stops the worker from reading the socket, waits for the calls in
// progress and closes the descriptor.
func (s *sock) close() {
	s.refs.Add(sockClosed)
	if s.w != nil {
		s.w.remove(s)
	}
	for s.refs.Load() != sockClosed {
		time.Sleep(20 * time.Microsecond)
	}
	_ = unix.Close(s.fd)
}

// listenUDP binds a non-blocking UDP socket the way net.ListenUDP("udp")
// does: a wildcard address gets a dual-stack IPv6 socket where the kernel
// allows it, an IPv4 address an IPv4 socket.
func listenUDP(ip netip.Addr, port int) (*sock, error) {
	ip = ip.Unmap()
	if ip.IsUnspecified() {
		s, err := bindUDP(unix.AF_INET6, netip.IPv6Unspecified(), port)
		if err == nil || ip.Is6() || err != unix.EAFNOSUPPORT {
			return s, err
		}
	}
	if ip.Is4() {
		return bindUDP(unix.AF_INET, ip, port)
	}
	return bindUDP(unix.AF_INET6, ip, port)
}

func bindUDP(family int, ip netip.Addr, port int) (*sock, error) {
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "udp", Err: err}
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
		sa = &unix.SockaddrInet6{Port: port, Addr: ip.As16(), ZoneId: zoneID(ip.Zone())}
	} else {
		sa = &unix.SockaddrInet4{Port: port, Addr: ip.As4()}
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
	}
	if err == nil {
		err = unix.Bind(fd, sa)
	}
	var local unix.Sockaddr
	if err == nil {
		local, err = unix.Getsockname(fd)
	}
	if err != nil {
		unix.Close(fd)
		return nil, &net.OpError{Op: "listen", Net: "udp", Addr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(port))), Err: err}
	}
	s := &sock{fd: fd, v6: family == unix.AF_INET6}
	switch a := local.(type) {
	case *unix.SockaddrInet4:
		s.local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		s.local = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).WithZone(ip.Zone()), uint16(a.Port))
	}
	return s, nil
}

// zoneID is the interface index an IPv6 zone names, 0 when none.
func zoneID(zone string) uint32 {
	if zone == "" {
		return 0
	}
	if ifi, err := net.InterfaceByName(zone); err == nil {
		return uint32(ifi.Index)
	}
	return 0
}

// rawCall makes a system call that cannot block (a non-blocking socket,
// MSG_DONTWAIT, epoll_wait without timeout) without entering the runtime's
// syscall state: the scheduler need not hand the P off for it, and sysmon
// is not woken (see the comment at the top of relay_linux.go). A call that
// could block must not use it: its P would be stuck for the duration.
func rawCall(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno) {
	if scheduledCalls {
		return unix.Syscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
}

// scheduledCalls makes rawCall an ordinary system call, as the relay made
// them before; BenchmarkRelayProcess sets it (PBX_RELAY_SCHED_CALLS=1) to
// compare both in one binary.
var scheduledCalls bool

// sendTo writes one datagram to addr without waiting: a full send buffer
// drops the packet (EAGAIN) rather than stalling the relay.
func (s *sock) sendTo(b []byte, addr netip.AddrPort) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.release()
	var sa unix.RawSockaddrInet6
	var salen uintptr
	ip := addr.Addr()
	if s.v6 {
		sa.Family = unix.AF_INET6
		sa.Addr = ip.As16()
		if z := ip.Zone(); z != "" {
			sa.Scope_id = zoneID(z)
		}
		salen = unix.SizeofSockaddrInet6
	} else {
		ip = ip.Unmap()
		if !ip.Is4() {
			return unix.EAFNOSUPPORT
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
		sa4.Family = unix.AF_INET
		sa4.Addr = ip.As4()
		salen = unix.SizeofSockaddrInet4
	}
	// The port is in network byte order at the same offset in both.
	pb := (*[2]byte)(unsafe.Pointer(&sa.Port))
	pb[0], pb[1] = byte(addr.Port()>>8), byte(addr.Port())
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		_, _, e := rawCall(unix.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&sa)), salen)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// recvFrom reads one datagram into buf without waiting; sa is scratch
// space for the source address.
func (s *sock) recvFrom(buf []byte, sa *unix.RawSockaddrAny) (int, netip.AddrPort, syscall.Errno) {
	for {
		salen := uint32(unix.SizeofSockaddrAny)
		n, _, e := rawCall(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&salen)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, netip.AddrPort{}, e
		}
		return int(n), sockaddrPort(sa), 0
	}
}

// sockaddrPort decodes a kernel socket address; the zone of a link-local
// source is not looked up.
func sockaddrPort(sa *unix.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		pb := (*[2]byte)(unsafe.Pointer(&a.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(pb[0])<<8|uint16(pb[1]))
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		pb := (*[2]byte)(unsafe.Pointer(&a.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(pb[0])<<8|uint16(pb[1]))
	}
	return netip.AddrPort{}
}
