package rtpcore

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux the relay is a few workers, each with its own epoll set
// holding the sockets of the legs given to it. A worker parks in the Go
// runtime's poller on its epoll descriptor alone; once woken it reads
// every ready socket, one datagram each (a leg's socket holds one packet
// per 20 ms), relays them, and asks the set again without blocking until a
// pass finds nothing. Thousands of sockets thus cost a few goroutines and
// one wake-up per batch rather than one per packet, and the worker gives
// its P back while it waits, as any goroutine does. A batch takes the
// worker's lock once and the time once.
//
// The calls of the hot path (epoll_wait with no timeout, recvfrom and
// sendto with MSG_DONTWAIT on non-blocking sockets) never block, so they
// are made as raw system calls, without telling the scheduler (see
// rawCall). A call through unix.Syscall enters and leaves the runtime's
// syscall state, and entering it wakes sysmon whenever the whole process
// had been idle; sysmon then polls every 20 µs until the process idles
// again. With packets arriving every few microseconds to milliseconds the
// process idles and wakes all the time: in a perf profile of
// BenchmarkRelayProcess sysmon's sleeps alone were 9% of the relay's
// samples, and making every call raw took the relay from 4.6 to 3.4 µs
// per packet (500 calls, ABAB; issue 16). With every call raw, though,
// sysmon slept through the relay's work, and on a loaded host the relay
// fell behind by hundreds of milliseconds far more often than before
// (BenchmarkRelayProcess, 500 calls, host load 4 to 13: latency max
// 0.3-1.5 s in 6 of 9 sets of phases, against 10-150 ms). So once every
// sysmonKick a worker makes its poll an ordinary call, which wakes sysmon
// if it sleeps: its own period for polling the network and preempting.
// Measured in one binary, alternating, at 500 calls and host load 4 to 7:
// all ordinary 4.1-4.4 µs per packet, a kick every 10 ms 2.8-3.2 with
// latency max 17-90 ms, every 1 ms 3.1-3.8 (sysmon as busy as with
// ordinary calls) and all raw 2.7-3.4, latency max 4-195 ms; these sets
// are noisy, the machine being shared (PBX_RELAY_KICK_US,
// PBX_RELAY_SCHED_CALLS).
//
// Two ways of waking less often were measured and are not used (issue 16):
// waiting in epoll_wait on the worker's own thread lowered the relay's CPU
// per packet, but the runtime counts a P in a system call as busy, so with
// the other Ps idle no thread polled the network for the rest of the
// process (its SIP sockets) until sysmon did, up to 10 ms later; and a
// pause between batches (relayPause, a nanosleep so that the packets of
// many legs gather) hands the P off on every pause and cost far more than
// it saved when the phones share the process. relayPause stays for
// BenchmarkRelayProcess to explore on a quiet machine.

// sysmonKick is how often a worker makes one of its calls an ordinary
// system call; zero: never.
var sysmonKick = 10 * time.Millisecond

// relayPause, when positive, is how long a worker lets packets gather
// after a batch smaller than pauseBelow. Zero: no pause.
var relayPause time.Duration

// pauseBelow is the batch size from which a worker does not pause: it is
// behind, and a pause would only put it further behind.
const pauseBelow = maxEvents / 4

// engineIO is the engine's relay workers, started with the first leg and
// stopped by Engine.Close.
type engineIO struct {
	mu      sync.Mutex
	workers []*worker
	next    int
	stopped bool
}

// worker reads the sockets registered in its epoll set.
type worker struct {
	log  *slog.Logger
	ep   *os.File // the epoll set, non-blocking, in the runtime's poller
	epfd int
	wake int // eventfd in the set, written to stop the worker
	stop atomic.Bool
	done chan struct{}

	mu      sync.Mutex
	socks   []*sock // by slot, the epoll event's data; nil when free
	free    []int32
	stopped bool

	// Used by the worker's goroutine only.
	events []unix.EpollEvent
	ready  []*sock // the sockets of events, looked up under mu once per batch
	buf    []byte
	from   unix.RawSockaddrAny
	kicked time.Time // the last ordinary system call, see poll
}

// maxEvents bounds the ready sockets taken from one epoll_wait.
const maxEvents = 256

// wakeSlot is the epoll data of a worker's eventfd.
const wakeSlot = -1

// workersFor is how many workers an engine runs: one for every two Ps.
// One worker relays a few hundred thousand packets a second; fewer, busier
// workers drain bigger batches per wake-up and leave Ps to the rest of the
// process.
func workersFor(procs int) int { return max(1, procs/2) }

func newWorker(log *slog.Logger) (*worker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeSlot}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll add: %w", err)
	}
	return &worker{
		log:    log,
		ep:     os.NewFile(uintptr(epfd), "epoll"),
		epfd:   epfd,
		wake:   wake,
		done:   make(chan struct{}),
		events: make([]unix.EpollEvent, maxEvents),
		ready:  make([]*sock, maxEvents),
		buf:    make([]byte, maxPacket),
	}, nil
}

// close releases the worker's descriptors once it has stopped.
func (w *worker) close() {
	unix.Close(w.wake)
	w.ep.Close()
}

// run serves the epoll set until the worker is stopped. It waits in the
// runtime's poller for the set to become readable, then takes ready
// sockets without blocking until there are none (see the comment at the
// top of the file). Sockets are level-triggered: one with more datagrams
// queued is reported again by the next round, so a busy socket cannot
// starve the others.
func (w *worker) run() {
	defer close(w.done)
	pause := unix.NsecToTimespec(int64(relayPause))
	rc, err := w.ep.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			for {
				now := time.Now()
				n, err := w.poll(int(fd), now)
				switch {
				case err == unix.EINTR:
					continue
				case err != nil:
					w.log.Error("rtp relay stopped", "err", err)
					return true
				case n == 0:
					return false // park until the set is readable
				}
				if w.serve(w.events[:n], now) {
					return true
				}
				if relayPause > 0 && n < pauseBelow {
					_ = unix.Nanosleep(&pause, nil)
				}
			}
		})
	}
	if err != nil && !w.stop.Load() {
		w.log.Error("rtp relay stopped", "err", err)
	}
}

// serve reads one datagram from each ready socket and relays it. It
// reports whether the worker is to stop. The packets of a batch share one
// arrival time: they were all queued by the time the batch began.
func (w *worker) serve(events []unix.EpollEvent, now time.Time) (stop bool) {
	ready := w.ready[:len(events)]
	w.mu.Lock()
	for i := range events {
		ready[i] = nil
		if slot := events[i].Fd; slot >= 0 && int(slot) < len(w.socks) {
			ready[i] = w.socks[slot]
		}
	}
	w.mu.Unlock()
	for i, s := range ready {
		ready[i] = nil
		if events[i].Fd == wakeSlot {
			if w.stop.Load() {
				return true
			}
			continue
		}
		if s == nil || !s.acquire() {
			continue
		}
		// A stale event for a slot reused since finds nothing to read.
		n, src, e := s.recvFrom(w.buf, &w.from)
		if e == 0 {
			if s.rtcp {
				s.leg.handleRTCP(w.buf[:n], src)
			} else {
				s.leg.handle(w.buf[:n], src, now)
			}
		}
		s.release()
	}
	return false
}

// add registers s with the worker's epoll set.
func (w *worker) add(s *sock) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrClosed
	}
	var slot int32
	if n := len(w.free); n > 0 {
		slot = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		slot = int32(len(w.socks))
		w.socks = append(w.socks, nil)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: slot}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		w.free = append(w.free, slot)
		return fmt.Errorf("epoll add: %w", err)
	}
	w.socks[slot] = s
	s.slot = slot
	s.reg = true
	return nil
}

// remove takes s out of the worker's epoll set; the worker may still be
// handling a packet of it (see sock.close).
func (w *worker) remove(s *sock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !s.reg {
		return
	}
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, s.fd, nil)
	w.socks[s.slot] = nil
	w.free = append(w.free, s.slot)
	s.reg = false
}

// halt stops the worker, waits for it and closes its descriptors.
func (w *worker) halt() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.stop.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(w.wake, one[:])
	<-w.done
	w.close()
}

// worker returns the worker for a new leg, starting the workers first.
func (e *Engine) worker() (*worker, error) {
	e.io.mu.Lock()
	defer e.io.mu.Unlock()
	if e.io.stopped {
		return nil, ErrClosed
	}
	if e.io.workers == nil {
		n := workersFor(runtime.GOMAXPROCS(0))
		ws := make([]*worker, 0, n)
		for range n {
			w, err := newWorker(e.log)
			if err != nil {
				for _, w := range ws {
					w.close()
				}
				return nil, fmt.Errorf("rtp relay: %w", err)
			}
			ws = append(ws, w)
		}
		for _, w := range ws {
			go w.run()
		}
		e.io.workers = ws
	}
	w := e.io.workers[e.io.next%len(e.io.workers)]
	e.io.next++
	return w, nil
}

// stopIO stops the workers; the legs are closed by then.
func (e *Engine) stopIO() {
	e.io.mu.Lock()
	ws := e.io.workers
	e.io.workers = nil
	e.io.stopped = true
	e.io.mu.Unlock()
	for _, w := range ws {
		w.halt()
	}
}

// openSocks binds a leg's RTP socket and, when the engine relays RTCP,
// the RTCP socket on the port above, both for one worker.
func (e *Engine) openSocks() (rtp, rtcp *sock, err error) {
	w, err := e.worker()
	if err != nil {
		return nil, nil, err
	}
	_, err = e.pool.take(func(port int) error {
		s, err := listenUDP(e.pool.bindIP, port)
		if err != nil {
			return err
		}
		if e.rtcp {
			r, err := listenUDP(e.pool.bindIP, port+1)
			if err != nil {
				s.close()
				return err
			}
			r.rtcp, r.w = true, w
			rtcp = r
		}
		s.w = w
		rtp = s
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return rtp, rtcp, nil
}

// closeSocks closes sockets that were never started and releases the
// port.
func (e *Engine) closeSocks(rtp, rtcp *sock) {
	if rtcp != nil {
		rtcp.close()
	}
	rtp.close()
	e.pool.release(int(rtp.local.Port()))
}

// startIO hands the leg's sockets to their worker.
func (l *Leg) startIO() error {
	l.conn.leg = l
	if err := l.conn.w.add(l.conn); err != nil {
		return err
	}
	if l.rtcp != nil {
		l.rtcp.leg = l
		if err := l.rtcp.w.add(l.rtcp); err != nil {
			l.conn.w.remove(l.conn)
			return err
		}
	}
	return nil
}

// stopIO takes the leg's sockets from their worker, waits for a packet
// being handled, closes them and releases the port into quarantine.
func (l *Leg) stopIO() {
	if l.rtcp != nil {
		l.rtcp.close()
	}
	l.conn.close()
	l.sess.e.pool.release(int(l.local.Port()))
}

// poll takes the ready events of the worker's set without waiting. Every
// sysmonKick it does so as an ordinary system call, which wakes sysmon if
// it is asleep (see the comment at the top of the file); otherwise as a
// raw one.
func (w *worker) poll(epfd int, now time.Time) (int, error) {
	if sysmonKick > 0 && now.Sub(w.kicked) >= sysmonKick {
		w.kicked = now
		return unix.EpollWait(epfd, w.events, 0)
	}
	return epollPoll(epfd, w.events)
}

// epollPoll takes the ready events of the set without waiting, as a raw
// call (see the comment at the top of the file).
func epollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := rawCall(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
