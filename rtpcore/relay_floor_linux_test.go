package rtpcore

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procRelay is the relay BenchmarkRelayProcess measures between its
// phones (PBX_BENCH_RELAY): the Engine (engine, the default), the least a
// relay on the socket API can do (floor: see floorRelay), or rtpengine as
// make bench-compare runs it (rtpengine: see startRTPEngine). The three
// are then measured with the same phones, packets and clock.
type procRelay interface {
	name() string
	cpu() time.Duration // the relaying process's CPU so far
	switches() int64    // its context switches so far
	close()
}

// startProcRelay starts the relay for phones, pairs of phone ports in
// order (phone i's packets go to phone i^1), and returns the port each
// phone sends to.
func startProcRelay(b *testing.B, phones []int) (procRelay, []int) {
	switch kind := os.Getenv("PBX_BENCH_RELAY"); kind {
	case "", "engine":
		return startEngineRelay(b, phones)
	case "floor":
		r, ports, err := startFloorRelay(procRelayIP, phones)
		if err != nil {
			b.Fatal(err)
		}
		return r, ports
	case "rtpengine":
		return startRTPEngine(b, phones)
	default:
		b.Fatalf("PBX_BENCH_RELAY=%q: engine, floor or rtpengine", kind)
		return nil, nil
	}
}

// selfRelay is a relay running in the benchmark's own process.
type selfRelay struct{}

func (selfRelay) cpu() time.Duration { return cpuTime() }
func (selfRelay) switches() int64    { return switches() }

type engineRelay struct {
	selfRelay
	e *Engine
}

func (engineRelay) name() string { return "engine" }
func (r engineRelay) close()     { r.e.Close() }

// startEngineRelay bridges each pair of phones through a session of an
// Engine.
func startEngineRelay(b *testing.B, phones []int) (procRelay, []int) {
	e, err := New(Options{BindIP: procRelayIP, PortMin: 20000, PortMax: 40000, Quarantine: -1, Priority: procRelayPriority}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ports := make([]int, 0, len(phones))
	for i := 0; i+1 < len(phones); i += 2 {
		s, err := e.NewSession(SessionOptions{ID: fmt.Sprint(i / 2)})
		if err != nil {
			e.Close()
			b.Fatal(err)
		}
		var legs [2]*Leg
		for j := range legs {
			if legs[j], err = s.NewLeg(fmt.Sprint(j)); err != nil {
				e.Close()
				b.Fatal(err)
			}
			legs[j].SetRemote(netip.AddrPortFrom(procPhoneIP, uint16(phones[i+j])))
			ports = append(ports, legs[j].Port())
		}
		if err := s.Bridge(legs[0], legs[1]); err != nil {
			e.Close()
			b.Fatal(err)
		}
	}
	return engineRelay{e: e}, ports
}

// floorRelay is the least a relay built on the socket API does per packet:
// one thread, at the Engine's priority, waiting in epoll_wait on every
// leg's socket, one recvfrom and one sendto a packet to a fixed peer, and
// the Engine's pause after a small batch. No latching, no taps, no
// statistics, no locks, one worker. What the Engine costs above it is
// its own; what it costs is the kernel's, which no relay on these system
// calls gets under.
type floorRelay struct {
	selfRelay
	fds   []int
	peers []unix.RawSockaddrInet4
	ep    int
	stop  atomic.Bool
	done  chan struct{} // nil until run starts
}

func (*floorRelay) name() string { return "floor" }

// startFloorRelay binds a socket on ip for each of phones and starts
// relaying; it returns the sockets' ports.
func startFloorRelay(ip netip.Addr, phones []int) (*floorRelay, []int, error) {
	r := &floorRelay{}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	r.ep = ep
	ports := make([]int, len(phones))
	for i, p := range phones {
		s, err := bindUDP(unix.AF_INET, ip, 0)
		if err != nil {
			r.close()
			return nil, nil, err
		}
		r.fds = append(r.fds, s.fd)
		ports[i] = int(s.local.Port())
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			r.close()
			return nil, nil, err
		}
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: procPhoneIP.As4()}
		pb := (*[2]byte)(unsafe.Pointer(&sa.Port))
		pb[0], pb[1] = byte(p>>8), byte(p)
		r.peers = append(r.peers, sa)
	}
	r.done = make(chan struct{})
	go r.run()
	return r, ports, nil
}

func (r *floorRelay) run() {
	runtime.LockOSThread() // never unlocked: the thread ends with its priority
	defer close(r.done)
	got, _ := setThreadPriority(procRelayPriority)
	pause := pauseFor(got)
	var evs [maxEvents]unix.EpollEvent
	var buf [maxPacket]byte
	var from unix.RawSockaddrAny
	ts := unix.NsecToTimespec(int64(pause))
	for !r.stop.Load() {
		n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(r.ep), uintptr(unsafe.Pointer(&evs[0])), maxEvents, 10, 0, 0)
		if e != 0 {
			continue
		}
		for _, ev := range evs[:n] {
			i := int(ev.Fd)
			fromLen := uint32(unix.SizeofSockaddrAny)
			got, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, uintptr(r.fds[i]), uintptr(unsafe.Pointer(&buf[0])), maxPacket,
				unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&from)), uintptr(unsafe.Pointer(&fromLen)))
			if e != 0 {
				continue
			}
			o := i ^ 1
			syscall.RawSyscall6(unix.SYS_SENDTO, uintptr(r.fds[o]), uintptr(unsafe.Pointer(&buf[0])), got,
				unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&r.peers[o])), unix.SizeofSockaddrInet4)
		}
		if pause > 0 && n < pauseBelow {
			syscall.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		}
	}
}

func (r *floorRelay) close() {
	if r.done != nil && r.stop.CompareAndSwap(false, true) {
		<-r.done
	}
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	unix.Close(r.ep)
}
