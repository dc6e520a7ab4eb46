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
// holding the sockets of the legs given to it, and a thread of its own
// (goLockedThread) that waits in epoll_wait on that set as a raw
// system call, bounded by relayWait. Once woken it reads every ready
// socket, one datagram each (a leg's socket holds one packet per 20 ms;
// one that has fallen behind, up to rxBatchLen: see rxBatch.read), and
// relays them. Thousands of sockets thus cost a few threads and one
// wake-up per batch rather than one per packet, and a packet wakes its
// relay thread straight from the kernel: no hand-off through the
// runtime's network poller, no futex wake of another thread, no goroutine
// to schedule. A batch takes the worker's lock once and the time once.
//
// A raw system call does not tell the scheduler, so the runtime counts the
// worker's P as busy for as long as it waits: GOMAXPROCS is raised by the
// number of workers (reserveProcs) so that the rest of the process keeps
// the Ps it had, among them the one whose idle thread waits in the
// runtime's network poller for the SIP sockets. A stop-the-world or a
// preemption signals the thread, which interrupts epoll_wait (EINTR,
// never restarted), and the worker stops at its next function call;
// relayWait bounds a missed signal. The calls of the hot path (recvfrom
// and sendto with MSG_DONTWAIT on non-blocking sockets) are raw too (see
// rawCall).
//
// An idle worker (nothing relayed for idleAfter) parks in the runtime's
// poller instead (see park), so that a PBX without media costs what it
// did: waiting on its thread cost a wake-up per relayWait and sysmon's
// preemption of the busy-looking goroutine every 10 ms, 16 to 47 ms of CPU
// per 3 s idle against 0.65 ms (BenchmarkRelayIdle guards it).
//
// Measured (issue 16, BenchmarkRelayProcess at 1,000 calls, the machine
// shared with other benchmarks, so ABAB and every phase listed; A: the
// poller design described below, B: this one). CPU per packet in the
// quietest sets A 3.20 2.73 2.98 2.91, B 2.45 2.53 2.71 2.74 (-12%); over
// all sets, loaded ones included, A 2.9-4.4 and B 2.5-3.7, context
// switches per packet A 0.04-0.27, B 0.03-0.12; with the side probe on
// (its GC every 100 ms and its round trips keep the runtime's poller
// awake in A too) A 3.65 3.60 4.05 3.98, B 4.14 4.08 4.00 4.04: the gain
// is the poller's wake-ups, and it is gone when the process is busy
// anyway. End to end (BenchmarkConcurrentCallsRelay, bin/pbx, SIPp)
// cpu_ns/packet at 500 calls A 3080 3160, B 2880 2960; at 1,000 calls A
// 3160 3160, B 2960 3200. The side probe
// (PBX_BENCH_SIDE=1: a UDP round trip through the runtime's poller every
// millisecond, standing for the SIP sockets) had a p99 of 845-1020 µs
// with A and 158-603 µs with B: raising GOMAXPROCS keeps the poller
// served, and the poller is no longer woken for the relay's batches. The
// GC's stop-the-world p99 was 3-117 ms with A and 0.5-84 ms with B, both
// set by how long the host took to run the threads to be stopped. The
// relay's own jitter p99 (every stream a probe) was 0.85-50 ms with A and
// 1.0-50 ms with B: on this 2-core host it depends on the other programs
// far more than on the relay, and both designs fall behind by seconds at
// 2,000 calls whenever the host is busy (the phones alone take over a
// core), B less often (loss A 54%, 33%; B 24%, 0%, 0%, 36%). perf
// record -g of the relaying process: sendto 40% (A) and 46% (B) of its
// samples (the loopback delivery to the phone and its wake-up included),
// recvfrom 23% and 18%, epoll_wait 18% (the runtime's netpoll half of it)
// and 13%, Go code and runtime the rest; B took 28% fewer samples for the
// same packets.
//
// Priority (Options.Priority): a worker's thread asks for it once locked
// (setThreadPriority). A realtime thread is woken by the first packet of
// a batch at once, ahead of the host's other programs; it then lets the
// batch gather for realtimeGather before it waits again, so that it wakes
// once per gathering rather than once per packet. Measured in the
// side-by-side (make bench-compare, 1,000 calls, machine shared): probe
// jitter p99 with normal priority 2.9 and 3.6 ms; realtime 0.75 ms at
// 3.9 µs per packet without gathering, 1.15-1.17 ms at 3.33-3.35 µs with
// 100-300 µs gathering, against 3.40 µs at normal priority; nice -10 with
// gathering 6.3 ms (a nice value does not wake the thread any sooner).
// Two workers on two cores (relayWorkers) changed nothing measurable
// then, at normal priority and 1,000 calls.
//
// Two realtime workers on two cores, measured (issue 16, bench-compare's
// held calls alone, PBX_COMPARE_CALLS, the machine shared with another
// engineer's benchmarks, alternating one and two workers). At 2,000 calls
// the relay thread (perf sched_switch) ran 3-8 ms at a stretch once every
// 20 ms and then waited 10 ms in epoll_wait with nothing to read: SIPp
// sends all its calls' packets in one burst per 20 ms (spreading the
// calls' first packets over 20 ms at random changed nothing), so a
// packet's wait was its place in the burst. Probe jitter p99 with one
// worker 1.67 1.99 1.45 2.1 ms, with two 0.83 0.82 ms; CPU per packet one
// 2.83 2.89 2.81 2.88 µs, two 2.81 3.00 µs, and two relayed 157,000
// packets/s against 137,000-145,000 (SIPp waited less on a busy relay).
// At 1,000 calls: jitter one 0.69 0.97 1.00 1.02 1.36 ms, two 0.51 0.49
// 0.46 ms; CPU per packet one 2.78 3.15 3.18 3.39 3.43 µs, two 3.26 3.18
// 3.18 µs. The Go runtime's preemption of a worker (sysmon, every 10 ms
// of one goroutine) hands its P through another thread: 30-40 µs, while
// the worker is idle, once per 20 ms.
//
// The Go side of a packet (issue 16, ~12% of the relay thread's samples
// at 1,000 calls, the kernel the rest) touches few cache lines: the hot
// fields of a leg are packed in its first four lines (see Leg), its target
// carries its kernel socket address built once, the session's last packet
// time is kept per leg, the engine's mono time is taken once per batch,
// the sockets of a batch are not counted in use one by one (see serve),
// the batch's legs are read ahead (warm), and the B2BUA's DTMF detector is
// shown telephone events only (AddEventTap). Measured ABAB on a shared
// host, all runs: BenchmarkConcurrentCallsRelay (bin/pbx, SIPp, 1,000
// calls, 20 s hold) cpu_ns/packet before 2900 2760 3200 3640 3420 3500
// 3140 2280 3240 3300, after 2500 2680 2500 3120 3060 3080 2740 2720 2860
// 2840 (median 3220 -> 2790, -13%; one pair of ten the other way, at a
// load average of 13);
// BenchmarkRelayProcess (no taps) before 3.36 3.33 3.46 3.17 2.63 3.13
// µs, after 3.24 3.28 2.97 3.06 2.73 3.22 (-3%, within the noise). Also
// measured and left off: edge-triggered epoll reading every socket with
// recvmmsg (saves epoll's second poll of each socket, costs recvmmsg's
// extra attempt: no gain), recvfrom for every socket of a full batch
// (PBX_RELAY_READ_ONE: no gain end to end although recvmmsg of one
// datagram costs ~165 ns more than recvfrom), a pause after small
// batches end to end (the relay is then preempted by the phones it wakes
// instead of sleeping: as many switches, no gain).
//
// History: before, a worker parked in the runtime's poller on its epoll
// descriptor and, once woken, polled the set without blocking until a
// pass found nothing, making one poll in every 10 ms an ordinary system
// call so that sysmon kept preempting and polling the network (entering
// the runtime's syscall state wakes sysmon whenever the process had been
// idle, and sysmon then polls every 20 µs, 9% of the relay's samples;
// with every call raw, sysmon slept through the relay's work and the
// relay fell behind by hundreds of milliseconds on a loaded host).
// Waiting in epoll_wait on the worker's own thread was measured then and
// rejected because, GOMAXPROCS not raised, the busy-looking P starved the
// runtime's network poller of the rest of the process until sysmon
// polled, up to 10 ms later. A pause between batches handed the P off on
// every pause and cost far more than it saved. A twin connected socket
// per leg for sending reordered a burst at latching (TestDTMFTapOnLeg);
// io_uring sends did not pay.
//
// Realtime, measured again (issue 16, 1,000 calls, machine shared). perf
// record -g -t of the relay thread end to end (bin/pbx, SIPp): sendto
// 44% (of which the loopback delivery to SIPp in the sending call's
// softirq 25%, SIPp's wake-up 2.5%, and sock_wfree 6.3%: each datagram
// freed once delivered wakes the sending socket's wait queue, where the
// worker's epoll entry sits, only for epoll's callback to find that the
// worker waits for input), epoll_pwait 18% (ep_item_poll 12%, about
// half of it level-triggered sockets polled again after being read),
// recvfrom 14%, recvmmsg 7% (SIPp sends in bursts: ~75 sockets a round,
// a third of the rounds small enough to pause), fdget 3.3%, scheduling
// 2%, Go 9-11%; 0.007 context switches per packet. BenchmarkRelayProcess
// (phones spread over 1 ms slots, so every round pauses): sendto 52%,
// recvfrom 18%, epoll_pwait 15%, scheduling and nanosleep 4.5%, Go 8.8%.
// Tried and left off, ABAB in one sitting:
//   - a send twin per RTP socket (a second socket on the leg's port in an
//     SO_REUSEPORT group whose BPF program steered every datagram to the
//     first, which then left the group open to no other bind): sock_wfree
//     fell from 6.3% to 1.1% of the thread's samples, yet the thread took
//     7% more samples for the same packets (2,000 more sockets: every
//     miss costs more), BenchmarkRelayProcess cpu-µs/pkt without 3.11
//     3.07 3.13 3.16 3.26 3.31, with 3.27 3.30 3.28 3.26 3.47 3.39 (six
//     pairs of six worse); end to end cpu_ns/packet without 2300 2480
//     2420 2100, with 2240 2180 2420 2640 2580;
//   - edge-triggered sockets read with recvmmsg until short (epoll's
//     second poll saved, a full read kept for the next round):
//     BenchmarkRelayProcess without 3.07 3.23 3.19, with 3.14 3.21 3.27,
//     the probe's jitter p99 484 402 541 against 1035 467 509 µs (with
//     the send twin on both sides: 3.18 3.22 3.23 against 3.31 3.29
//     3.47): likely the second poll of a socket just read finds its
//     lines hot, while recvmmsg's attempt past the last datagram takes
//     the queue's lock;
//   - a 300 µs gather instead of 200: 3.10 3.20 against 3.09 3.09 (-2%),
//     the probe's jitter p99 1240 519 against 588 740 µs and its latency
//     p99 539 535 against 588 667 µs (with the twin: 3.28 3.26 against
//     3.20 3.21, jitter p99 375-381 against 516-545 µs); end to end,
//     pausing after every batch short of maxEvents rather than of
//     pauseBelow (SIPp's bursts make ~75 ready sockets a round) cut the
//     epoll waits by a third to a half but cpu_ns/packet went 2320 2600
//     against 2660 2680 (the send twin on both);
//   - the batch's sends on one IPPROTO_RAW socket, IPv4 and UDP headers
//     built by the relay (no per-leg socket written, no sock_wfree, no
//     UDP checksum): 3.16 3.12 3.15 against 3.11 3.15 3.14, nothing for
//     CAP_NET_RAW, IPv4 only and the socket's options bypassed.
// What is left is the kernel's own work per datagram: on loopback the
// sending call also delivers the datagram to the phone and wakes it (a
// quarter to a third of the thread), then one recvfrom, one sendto and
// about two ready-list polls per packet, each on a socket whose lines
// are cold after 20 ms among thousands.
//
// The floor, measured (issue 16's target of half rtpengine's CPU per
// packet). BenchmarkRelayProcess runs rtpengine and a floor relay between
// the same phones (PBX_BENCH_RELAY): the floor is one realtime thread
// with the same pause, one recvfrom and one sendto a packet to a fixed
// peer and nothing else, the least any relay on these system calls does.
// 1,000 calls, six sittings in turn on a 2-core VM with retpolines, CPU
// per packet: rtpengine as shipped 9.63-10.54 µs (median 10.16, jitter
// p99 29-190 ms), the floor 6.47-7.35 (6.79, 0.67 of rtpengine), this
// relay 7.56-9.06 (8.23, 0.81; jitter p99 0.5-6.6 ms), this relay with
// one worker 6.63-8.35 (7.60; 2.1-22 ms). Half of rtpengine's is below
// the floor's best run. rtpengine realtime there woke once a packet and
// took the phones' CPU (they sent half their packets), so its figure is
// not of the same load. Also measured, with a C prototype of the floor
// and C phones, not kept: io_uring in place of epoll and the two calls
// (multishot recvmsg into a ring of provided buffers, registered files,
// the batch's sendmsgs submitted at once, DEFER_TASKRUN) 6.24 6.50 6.91
// µs against 6.28 6.46 6.16 (it saves the system call entries and fdget
// and adds its own request and task-work costs); without the pause it
// was cheaper, 6.54 against 7.42, but the pause does more. Connected
// sockets (the route cached, no address per send) 5.66 6.46 6.54
// against 6.25 6.94 6.57, -4%, but a connected socket takes no packet
// from any other address, so a phone whose NAT moves it could not be
// latched again.

// relayWait bounds a worker's wait in epoll_wait. The wait is a raw
// system call on the worker's own thread (see the comment at the top of
// the file); a preemption or a stop-the-world signals the thread, which
// cuts the wait short, and the runtime signals again every 100 µs until
// it stops, so relayWait is only the backstop for a signal that arrived
// just before the wait began.
const relayWait = 10 * time.Millisecond

// idleAfter is how long a worker that relays nothing keeps its thread
// waiting before it parks in the runtime's poller (see park).
const idleAfter = time.Second

// relayPause, when positive, is how long a worker lets packets gather
// after a batch smaller than pauseBelow before it waits again: fewer,
// bigger batches for at most that much added latency. Zero: the worker's
// own (realtimeGather for a realtime thread, else none); negative: none
// (BenchmarkRelayProcess: PBX_RELAY_PAUSE_US).
var relayPause time.Duration

// realtimeGather is a realtime worker's pause after a small batch (see
// relayPause): the first packet wakes it at once, and those arriving in
// the next 100 µs are relayed together, about 10 a batch per worker at
// 1,000 calls. With two workers, 100 µs rather than 200 (measured ABAB at
// 2,000 calls, bench-compare's held calls alone, one sitting): probe
// jitter p99 0.52 0.66 0.93 0.85 0.61 1.64 ms against 0.94 1.21 1.17 0.86
// 1.40 1.26 (median 0.76 against 1.19), CPU per packet 2.86 2.91 3.29
// 3.35 3.07 3.78 µs against 2.85 3.07 3.10 2.84 3.42 3.30 (median +3%,
// within the noise); no pause at all: 0.40-0.75 ms at 4.4-4.9 µs.
// Measured again on a slower VM (retpolines; bench-compare's held calls
// alone, ABBA three times, 100 µs against 200): at 1,000 calls CPU per
// packet 7.7 7.5 6.2 against 6.5 7.0 6.3 µs, but against the same run's
// rtpengine 0.78 0.74 0.74 against 0.65 0.76 0.75, probe jitter p99 1.27
// 1.11 0.69 against 0.95 1.34 0.89 ms; at 2,000 calls 7.1 6.2 6.6
// against 6.2 6.5 6.0 µs, jitter 2.42 1.73 1.91 against 2.04 2.25 1.96
// ms; BenchmarkRelayProcess (1,000 calls, six pairs) 8.45-9.27 against
// 8.04-8.50 µs, medians -5%. A few percent, inside the drift between
// runs, against the jitter the quieter machine above showed: left at 100.
const realtimeGather = 100 * time.Microsecond

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
	e    *Engine
	log  *slog.Logger
	tid  atomic.Int32 // the worker's thread, once it has its priority
	epfd int          // the epoll set
	wake int          // eventfd in the set, written to stop the worker
	stop atomic.Bool
	done chan struct{}
	// batch counts the worker's batches, begun and ended: odd while it
	// serves one (see serve).
	batch atomic.Uint32

	mu      sync.Mutex
	socks   []*sock // by slot, the epoll event's data; nil when free
	free    []int32
	stopped bool
	live    atomic.Int32 // sockets registered

	// Used by the worker's goroutine only.
	events []unix.EpollEvent
	ready  []*sock // the sockets of events, looked up under mu once per batch
	rx     rxBatch
	sink   uintptr // what warm read, kept so that its loads are made
}

// maxEvents bounds the ready sockets taken from one epoll_wait.
const maxEvents = 256

// wakeSlot is the epoll data of a worker's eventfd.
const wakeSlot = -1

// workersFor is how many workers an engine runs: one for every two Ps,
// and at least two where there are two. One worker relays a few hundred
// thousand packets a second; fewer, busier workers drain bigger batches
// per wake-up and leave Ps to the rest of the process. But phones send in
// step (every 20 ms, SIPp's rtp_stream all of its calls at once), and one
// worker drains such a burst alone while the second core waits: at 2,000
// calls on two cores it was busy 5-8 ms of every 20 and a packet arriving
// at the start of a burst waited that long. Two workers halve the burst
// (legs are dealt to the workers in turn) for no more CPU per packet; see
// the measurements at the top of the file.
func workersFor(procs int) int {
	if relayWorkers > 0 {
		return relayWorkers
	}
	return min(procs, max(2, procs/2))
}

// relayWorkers, when positive, replaces workersFor's count
// (BenchmarkRelayProcess: PBX_RELAY_WORKERS).
var relayWorkers int

func newWorker(e *Engine) (*worker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	// Non-blocking for the runtime's poller to watch it (see park);
	// epoll_wait heeds its timeout alone.
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
		e:      e,
		log:    e.log,
		epfd:   epfd,
		wake:   wake,
		done:   make(chan struct{}),
		events: make([]unix.EpollEvent, maxEvents),
		ready:  make([]*sock, maxEvents),
	}, nil
}

// close releases the worker's descriptors once it has stopped.
func (w *worker) close() {
	unix.Close(w.wake)
	unix.Close(w.epfd)
}

// run serves the epoll set until the worker is stopped, on a thread of
// its own (goLockedThread) that waits in epoll_wait (see the comment at the top of the
// file). Sockets are level-triggered: one with more datagrams queued is
// reported again by the next wait, so a busy socket cannot starve the
// others.
func (w *worker) run() {
	defer close(w.done)
	gather := w.setPriority()
	w.tid.Store(int32(unix.Gettid()))
	busy := time.Now() // the last batch
	for {
		n, err := epollWait(w.epfd, w.events, relayWait)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			w.log.Error("rtp relay stopped", "err", err)
			return
		case n == 0:
			if time.Since(busy) >= idleAfter {
				if err := w.park(); err != nil {
					w.log.Error("rtp relay stopped", "err", err)
					return
				}
			}
			continue
		}
		busy = time.Now()
		if w.serve(w.events[:n], busy) {
			return
		}
		if gather > 0 && n < pauseBelow {
			pause(gather)
		}
	}
}

// setPriority gives the worker's thread its priority and returns the
// worker's pause after a small batch (see relayPause).
func (w *worker) setPriority() time.Duration {
	got, err := setThreadPriority(w.e.priority)
	if err != nil {
		w.log.Info("rtp relay: thread priority refused by the host; allow it with systemd's LimitRTPRIO= (realtime) or LimitNICE= (high)",
			"asked", w.e.priority.String(), "got", got.String(), "err", err)
	}
	return pauseFor(got)
}

// pauseFor is the pause after a small batch of a relay thread running at
// priority p (see relayPause).
func pauseFor(p Priority) time.Duration {
	switch {
	case relayPause != 0:
		return max(relayPause, 0)
	case p == PriorityRealtime:
		return realtimeGather
	}
	return 0
}

// park waits in the runtime's poller until the set has a ready socket (or
// the worker's eventfd), giving the worker's thread and P back meanwhile:
// an idle worker then costs nothing, where waiting on its thread costs a
// wake-up every relayWait and sysmon's preemption of the busy-looking
// goroutine every 10 ms. The poller watches a duplicate of the set's
// descriptor, closed once the set is ready, so that it is not told of
// the set's every batch while the worker relays.
func (w *worker) park() error {
	fd, err := unix.FcntlInt(uintptr(w.epfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("epoll dup: %w", err)
	}
	f := os.NewFile(uintptr(fd), "epoll")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	// Level-triggered events stay in the set once reported: peeking at
	// one leaves it for the next wait.
	return rc.Read(func(uintptr) bool {
		n, err := epollWait(w.epfd, w.events[:1], 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
}

// pause sleeps d on the worker's thread, as a raw system call (see
// epollWait); a signal cuts it short.
func pause(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// serve reads each ready socket, for what it has queued when it has
// fallen behind (see rxBatch.read), and relays it. It
// reports whether the worker is to stop. The packets of a batch share one
// arrival time: they were all queued by the time the batch began.
//
// The sockets a batch reads and sends on are not counted in use one by
// one (two locked instructions each, ~2% of the relay's samples): the
// worker's batch count is odd while it serves, and a socket being closed
// waits for the batch in progress of every worker of the engine to end
// (see sock.close); a batch skips a socket already closing.
func (w *worker) serve(events []unix.EpollEvent, now time.Time) (stop bool) {
	w.batch.Add(1)
	stop = w.serveBatch(events, now)
	w.batch.Add(1)
	return stop
}

func (w *worker) serveBatch(events []unix.EpollEvent, now time.Time) (stop bool) {
	ready := w.ready[:len(events)]
	w.mu.Lock()
	for i := range events {
		ready[i] = nil
		if slot := events[i].Fd; slot >= 0 && int(slot) < len(w.socks) {
			ready[i] = w.socks[slot]
		}
	}
	w.mu.Unlock()
	if warmAhead {
		w.warm(ready)
	}
	w.rx.next(len(events))
	mono := w.e.mono(now)
	for i, s := range ready {
		ready[i] = nil
		if events[i].Fd == wakeSlot {
			if w.stop.Load() {
				return true
			}
			continue
		}
		if s == nil || s.closing() {
			continue
		}
		// A stale event for a slot reused since finds nothing to read.
		// A socket that has fallen behind is read for what it has
		// queued, up to rxBatchLen, its datagrams relayed in order.
		n := w.rx.read(s)
		for j := range n {
			pkt, src := w.rx.packet(j)
			if s.rtcp {
				s.leg.handleRTCP(pkt, src)
			} else {
				s.leg.handleAt(pkt, src, now, mono)
			}
		}
	}
	return false
}

// awaitBatches waits for the batch in progress, if any, of each worker
// of the engine and of w (a test's worker), which may be using a socket
// that is closing; a batch that begins later sees it closing and leaves
// it alone.
func (e *Engine) awaitBatches(w *worker) {
	e.io.mu.Lock()
	ws := append(make([]*worker, 0, len(e.io.workers)+1), e.io.workers...)
	e.io.mu.Unlock()
	for _, x := range append(ws, w) {
		if b := x.batch.Load(); b&1 == 1 {
			for x.batch.Load() == b {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
}

// warmAhead makes serve touch a batch's legs ahead (see warm);
// BenchmarkRelayProcess clears it (PBX_RELAY_WARM=0) to compare both in
// one binary.
var warmAhead = true

// warm reads, for every ready socket of a batch before the first is
// handled, the first cache lines of its leg and of the leg's peer, their
// targets and the peer's socket: what handling a packet reads first. The misses
// of different legs then overlap, where handling the sockets in turn takes
// them one at a time, each after system calls that have pushed them out of
// the nearer caches (the leg's mutex was the hottest instruction of the
// relay's Go code, a miss behind a locked instruction).
func (w *worker) warm(ready []*sock) {
	var sum uintptr
	for _, s := range ready {
		if s == nil || s.leg == nil {
			continue
		}
		l := s.leg
		sum += uintptr(l.lastPacket.Load())
		if t := l.target.Load(); t != nil {
			sum += uintptr(t.ap.Port())
		}
		if p := l.peer.Load(); p != nil {
			sum += uintptr(p.pktsOut.Load()) + uintptr(p.conn.fd)
			if t := p.target.Load(); t != nil {
				sum += t.raw.salen
			}
		}
	}
	w.sink = sum
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
	w.live.Add(1)
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
	w.live.Add(-1)
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
		n := workersFor(procsBefore())
		ws := make([]*worker, 0, n)
		for range n {
			w, err := newWorker(e)
			if err != nil {
				for _, w := range ws {
					w.close()
				}
				return nil, fmt.Errorf("rtp relay: %w", err)
			}
			ws = append(ws, w)
		}
		reserveProcs(n)
		for _, w := range ws {
			goLockedThread(w.run)
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
	if ws != nil {
		reserveProcs(-len(ws))
	}
}

// reserved counts the Ps held by the relay workers of every engine in the
// process: each worker keeps one busy all its life (it waits in a raw
// system call), so GOMAXPROCS is raised by their number for the rest of
// the process to keep the Ps it had, among them the one that waits in the
// runtime's network poller.
var reserved struct {
	sync.Mutex
	n    int // workers running
	base int // GOMAXPROCS before the first of them, while n > 0
}

// procsBefore is GOMAXPROCS without the Ps the workers hold.
func procsBefore() int {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.n > 0 {
		return reserved.base
	}
	return runtime.GOMAXPROCS(0)
}

// reserveProcs adds n workers (n < 0: removes them) to GOMAXPROCS.
func reserveProcs(n int) {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.n == 0 {
		reserved.base = runtime.GOMAXPROCS(0)
	}
	reserved.n += n
	runtime.GOMAXPROCS(reserved.base + reserved.n)
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

// epollWait takes the ready events of the set, waiting at most wait, as a
// raw system call: the worker's thread is its own and its P is reserved
// for it (see reserveProcs), so nothing else waits for it to return.
func epollWait(epfd int, events []unix.EpollEvent, wait time.Duration) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(wait.Milliseconds()), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
