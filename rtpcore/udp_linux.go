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

	// refs counts the calls using fd other than a relay worker's (see
	// worker.serve): injections and RTCP sends. Closing adds sockClosed,
	// after which no new use starts, and the descriptor is closed once the
	// count has drained and the workers' batches in progress have ended,
	// so that a reused descriptor number is never read or written.
	refs atomic.Int64

	leg  *Leg
	rtcp bool
	w    *worker
	slot int32 // index in w.socks while registered, guarded by w.mu
	reg  bool  // registered with w, guarded by w.mu

	served uint32 // w's round that last read it (see rxBatch.read), w's only
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

// closing reports whether close has begun: a worker's batch leaves the
// socket alone.
func (s *sock) closing() bool { return s.refs.Load() >= sockClosed }

// close stops the worker from reading the socket, waits for the calls in
// progress and the workers' batches and closes the descriptor.
func (s *sock) close() {
	s.refs.Add(sockClosed)
	if s.w != nil {
		s.w.remove(s)
		s.w.e.awaitBatches(s.w)
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
		noPMTUDiscovery(fd, family)
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

// noPMTUDiscovery makes the socket's datagrams go out with DF set but
// without path MTU discovery (IP_PMTUDISC_PROBE): each send skips the
// route's MTU bookkeeping (about 1% of the relay's CPU), and RTP stays far
// below any MTU. A kernel that refuses it leaves the default.
func noPMTUDiscovery(fd, family int) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	if family == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
	}
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

// rawDest is a destination in the form the kernel takes it for the
// socket's family, built once when a leg's target changes (see dest)
// rather than for every packet.
type rawDest struct {
	sa    unix.RawSockaddrInet6
	salen uintptr // 0: the address does not suit the socket (EAFNOSUPPORT)
}

// rawDest builds addr for sendRaw on s.
func (s *sock) rawDest(addr netip.AddrPort) (d rawDest) {
	ip := addr.Addr()
	if s.v6 {
		d.sa.Family = unix.AF_INET6
		d.sa.Addr = ip.As16()
		if z := ip.Zone(); z != "" {
			d.sa.Scope_id = zoneID(z)
		}
		d.salen = unix.SizeofSockaddrInet6
	} else {
		ip = ip.Unmap()
		if !ip.Is4() {
			return d
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&d.sa))
		sa4.Family = unix.AF_INET
		sa4.Addr = ip.As4()
		d.salen = unix.SizeofSockaddrInet4
	}
	// The port is in network byte order at the same offset in both.
	pb := (*[2]byte)(unsafe.Pointer(&d.sa.Port))
	pb[0], pb[1] = byte(addr.Port()>>8), byte(addr.Port())
	return d
}

// sendTo writes one datagram to addr without waiting: a full send buffer
// drops the packet (EAGAIN) rather than stalling the relay.
func (s *sock) sendTo(b []byte, addr netip.AddrPort) error {
	d := s.rawDest(addr)
	return s.sendRaw(b, &d)
}

// sendRaw is sendTo to a destination built by rawDest.
func (s *sock) sendRaw(b []byte, d *rawDest) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	err := s.send(b, d)
	s.release()
	return err
}

// sendInBatch is sendRaw from a relay worker's batch, which closing waits
// for (see worker.serve) instead of counting the call.
func (s *sock) sendInBatch(b []byte, d *rawDest) error {
	if s.closing() {
		return net.ErrClosed
	}
	return s.send(b, d)
}

// send writes b to d; the caller keeps the descriptor open.
func (s *sock) send(b []byte, d *rawDest) error {
	if d.salen == 0 {
		return unix.EAFNOSUPPORT
	}
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		_, _, e := rawCall(unix.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&d.sa)), d.salen)
		switch e {
		case unix.EINTR:
			continue
		case 0:
			return nil
		}
		return e
	}
}

// recvOne reads one datagram into b's first buffer without waiting.
func (s *sock) recvOne(b *rxBatch) (int, syscall.Errno) {
	for {
		salen := uint32(unix.SizeofSockaddrAny)
		n, _, e := rawCall(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(unsafe.Pointer(&b.bufs[0][0])), maxPacket, unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&b.names[0])), uintptr(unsafe.Pointer(&salen)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		b.hdrs[0].Len = uint32(n)
		return 1, 0
	}
}

// readOne makes a relay worker read one datagram per ready socket per
// round, as it did before rxBatch.read; BenchmarkRelayProcess sets it
// (PBX_RELAY_READ_ONE=1) to compare both in one binary.
var readOne bool

// rxBatchLen is how many datagrams a relay worker takes from a ready
// socket that has fallen behind, per round (see rxBatch.read).
const rxBatchLen = 8

// rxBatch is a relay worker's receive vector for recvmmsg(2): buffers,
// source addresses and headers owned by the worker and reused for every
// socket it reads.
type rxBatch struct {
	hdrs  [rxBatchLen]unix.Mmsghdr
	iovs  [rxBatchLen]unix.Iovec
	names [rxBatchLen]unix.RawSockaddrAny
	bufs  [rxBatchLen][maxPacket]byte
	init  bool   // hdrs point at iovs, names and bufs
	round uint32 // the worker's rounds (epoll_wait batches) so far
	busy  bool   // the current round's batch is full (see read)
}

// next starts a round of events ready sockets.
func (b *rxBatch) next(events int) {
	b.round++
	b.busy = events >= maxEvents
}

// read takes the datagrams of a ready socket of the worker's current
// round; packet returns each. A leg's socket mostly holds one packet (one
// per 20 ms) and is not ready in consecutive rounds: it is read with one
// recvfrom. One that was ready in the round before too has fallen behind
// (a burst, a phone sending every 5 or 10 ms, a scheduling hiccup, rounds
// slowed by a busy worker), and reading one datagram per round would
// serve it no faster than a 20 ms leg while its queue, the delay of its
// audio, grew without bound: it is read for up to rxBatchLen at once with
// one recvmmsg (which costs more than recvfrom for a single datagram),
// still bounded so that a flooding socket cannot hold up the others. So
// is every socket of a full batch: more sockets are ready than a round
// takes, epoll reports each only every few rounds, and the worker is
// behind on all of them. A socket with nothing queued (a stale event)
// reads none.
func (b *rxBatch) read(s *sock) int {
	behind := b.busy || s.served == b.round-1
	s.served = b.round
	var n int
	if behind && !readOne {
		n, _ = s.recvBatch(b)
	} else {
		n, _ = s.recvOne(b)
	}
	return n
}

// recvBatch reads up to rxBatchLen datagrams queued on s, in arrival
// order, without waiting.
func (s *sock) recvBatch(b *rxBatch) (int, syscall.Errno) {
	if !b.init {
		for i := range b.hdrs {
			b.iovs[i].Base = &b.bufs[i][0]
			b.iovs[i].SetLen(maxPacket)
			h := &b.hdrs[i].Hdr
			h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
			h.Iov = &b.iovs[i]
			h.SetIovlen(1)
		}
		b.init = true
	}
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrAny
	}
	for {
		n, _, e := rawCall(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&b.hdrs[0])), rxBatchLen, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// packet is the i-th datagram of the last read and its source.
func (b *rxBatch) packet(i int) ([]byte, netip.AddrPort) {
	return b.bufs[i][:b.hdrs[i].Len], sockaddrPort(&b.names[i])
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
