package e2e

import (
	"testing"
	"time"
)

// regMemory is a system's process memory around the REGISTER ladder, in kB
// of proportional set size (every process of the system).
type regMemory struct {
	idle  int64 // after start, before the first REGISTER
	peak  int64 // the highest sample during the ladder
	end   int64 // right after the ladder
	after int64 // wait after the ladder ended
	wait  time.Duration
	// back is when, after the ladder ended, memory was first within 20% of
	// idle; negative when it never was within wait.
	back time.Duration
}

// settled tells whether memory was back within 20% of idle at the end of the wait.
func (m regMemory) settled() bool {
	return m.idle > 0 && m.after > 0 && float64(m.after) <= 1.2*float64(m.idle)
}

// memWatch samples the memory of some processes until stopped.
type memWatch struct {
	stop chan struct{}
	peak chan int64
}

// watchMemory samples the memory of pids every interval (and once at once)
// until end.
func watchMemory(pids []int, every time.Duration) *memWatch {
	w := &memWatch{stop: make(chan struct{}), peak: make(chan int64, 1)}
	go func() {
		var peak int64
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if kB, err := readPSS(pids); err == nil {
				peak = max(peak, kB)
			}
			select {
			case <-w.stop:
				w.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// end stops the sampling and returns the highest sample.
func (w *memWatch) end() int64 {
	close(w.stop)
	return <-w.peak
}

// settleMemory samples the memory of pids each second for wait after the
// load ended and fills m.after (the last sample), m.back and m.wait.
func settleMemory(b *testing.B, pids []int, m *regMemory, wait time.Duration) {
	m.wait, m.back = wait, -1
	start := time.Now()
	for {
		kB := pssKB(b, pids)
		elapsed := time.Since(start)
		if m.back < 0 && float64(kB) <= 1.2*float64(m.idle) {
			m.back = elapsed
		}
		if elapsed >= wait {
			m.after = kB
			return
		}
		time.Sleep(min(time.Second, wait-elapsed))
	}
}
