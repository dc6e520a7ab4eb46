package rtpcore

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

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

func (r engineRelay) name() string {
	if r.e.KernelForwarding() {
		return "engine+kernel"
	}
	return "engine"
}
func (r engineRelay) close() { r.e.Close() }

// startEngineRelay bridges each pair of phones through a session of an
// Engine.
func startEngineRelay(b *testing.B, phones []int) (procRelay, []int) {
	e, err := New(Options{BindIP: procRelayIP, PortMin: 20000, PortMax: 40000, Quarantine: -1, Priority: procRelayPriority,
		KernelForwarding: os.Getenv("PBX_RELAY_KERNEL") == "1"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	ports := make([]int, 0, len(phones))
	for i := 0; i+1 < len(phones); i += 2 {
		s, err := e.NewSession(SessionOptions{ID: fmt.Sprint(i / 2)})
		if err != nil {
			b.Fatal(err)
		}
		var legs [2]*Leg
		for j := range legs {
			if legs[j], err = s.NewLeg(fmt.Sprint(j)); err != nil {
				b.Fatal(err)
			}
			legs[j].SetRemote(netip.AddrPortFrom(procPhoneIP, uint16(phones[i+j])))
			ports = append(ports, legs[j].Port())
		}
		if err := s.Bridge(legs[0], legs[1]); err != nil {
			b.Fatal(err)
		}
	}
	ok = true
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
	socks []*sock
	peers []rawDest // peers[i]: phone i
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
		r.socks = append(r.socks, s)
		ports[i] = int(s.local.Port())
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			r.close()
			return nil, nil, err
		}
		r.peers = append(r.peers, s.rawDest(netip.AddrPortFrom(procPhoneIP, uint16(p))))
	}
	r.done = make(chan struct{})
	goLockedThread(r.run)
	return r, ports, nil
}

// run relays with the Engine's own system calls (epollWait, recvOne,
// send, pause) and nothing between them.
func (r *floorRelay) run() {
	defer close(r.done)
	got, _ := setThreadPriority(procRelayPriority)
	gather := pauseFor(got)
	events := make([]unix.EpollEvent, maxEvents)
	var rx rxBatch
	for !r.stop.Load() {
		n, err := epollWait(r.ep, events, relayWait)
		if err != nil {
			continue
		}
		for _, ev := range events[:n] {
			i := int(ev.Fd)
			if k, _ := r.socks[i].recvOne(&rx); k == 1 {
				pkt, _ := rx.packet(0)
				_ = r.socks[i^1].send(pkt, &r.peers[i^1])
			}
		}
		if gather > 0 && n < pauseBelow {
			pause(gather)
		}
	}
}

func (r *floorRelay) close() {
	if r.done != nil && r.stop.CompareAndSwap(false, true) {
		<-r.done
	}
	for _, s := range r.socks {
		s.close()
	}
	unix.Close(r.ep)
}
