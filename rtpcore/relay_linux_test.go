package rtpcore

import (
	"syscall"
	"testing"
	"time"
)

// threadCPU is the CPU time of the process's threads so far, as the
// kernel counts it (getrusage): a thread spinning in system calls shows.
func threadCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestRelayWorkerSleepsWhenIdle proves that a worker blocks once the
// packets stop, rather than polling its epoll set: after relaying a burst,
// the process uses next to no CPU over a quiet window.
func TestRelayWorkerSleepsWhenIdle(t *testing.T) {
	e := newEngine(t, Options{})
	_, la, _, pa, pb := bridgedPair(t, e)
	for i := range 50 {
		pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
		if got, _ := pb.recv(2 * time.Second); got == nil {
			t.Fatalf("packet %d not relayed", i)
		}
	}
	const window = 300 * time.Millisecond
	cpu0, start := threadCPU(t), time.Now()
	time.Sleep(window) // the quiet window measured, not a wait for an event
	cpu, wall := threadCPU(t)-cpu0, time.Since(start)
	// A worker polling without blocking would use the whole window.
	if cpu > wall/10 {
		t.Errorf("idle relay used %v of CPU in %v", cpu, wall)
	}
	// And it still wakes for the next packet.
	pa.sendTo(legTo(la), pa.packet(PayloadPCMA, 160))
	if got, _ := pb.recv(2 * time.Second); got == nil {
		t.Fatal("packet after the quiet window not relayed")
	}
}

// TestRelayBatchOfManyLegs proves that packets arriving on many legs at
// once, served in batches sharing one lock and one timestamp, are each
// relayed once and counted on their own leg.
func TestRelayBatchOfManyLegs(t *testing.T) {
	e := newEngine(t, Options{NoRTCP: true})
	pairs := bridgedPairs(t, e, 20)
	for round := range 5 {
		for _, p := range pairs {
			p.pa.sendTo(legTo(p.la), p.pa.packet(PayloadPCMA, 160))
		}
		for i, p := range pairs {
			if got, _ := p.pb.recv(2 * time.Second); got == nil {
				t.Fatalf("round %d: packet of pair %d not relayed", round, i)
			}
		}
	}
	for i, p := range pairs {
		if st := p.la.Stats(); st.PacketsIn != 5 {
			t.Errorf("pair %d: leg received %d packets, want 5", i, st.PacketsIn)
		}
	}
}

// legPair is a bridged pair of legs and their phones: pa sends to la and
// pb receives what the relay sends from lb.
type legPair struct {
	la, lb *Leg
	pa, pb *phone
}

// bridgedPairs makes n bridged pairs on e (see bridgedPair).
func bridgedPairs(t *testing.T, e *Engine, n int) []legPair {
	t.Helper()
	pairs := make([]legPair, n)
	for i := range pairs {
		_, la, lb, pa, pb := bridgedPair(t, e)
		pairs[i] = legPair{la, lb, pa, pb}
	}
	return pairs
}

// TestWorkersFor checks how many relay workers an engine runs for the Ps
// it has: two where there are two (a burst of packets is drained on both
// cores), one for every two Ps beyond.
func TestWorkersFor(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 2, 6: 3, 8: 4, 16: 8} {
		if got := workersFor(procs); got != want {
			t.Errorf("workersFor(%d) = %d, want %d", procs, got, want)
		}
	}
}
