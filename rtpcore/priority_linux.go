package rtpcore

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// realtimePriority is the SCHED_FIFO priority of a realtime relay thread:
// low among realtime priorities (1-99), under the kernel's own threaded
// interrupts (50), above every ordinary thread.
const realtimePriority = 10

// highNice is the nice value of a high-priority relay thread, and of a
// realtime one that the host refused realtime scheduling.
const highNice = -10

// setThreadPriority schedules the calling thread at p, or as near under
// it as the process may (root or CAP_SYS_NICE; otherwise RLIMIT_RTPRIO
// for realtime, RLIMIT_NICE for high: systemd's LimitRTPRIO= and
// LimitNICE=). It returns the priority the thread got and, when that is
// under p, why.
//
// The thread must be locked to its goroutine for life (goLockedThread):
// the runtime then starts new threads from its template thread, never by
// cloning this one, so no other thread of the process inherits the
// priority.
func setThreadPriority(p Priority) (Priority, error) {
	var refused error
	if p >= PriorityRealtime {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: realtimePriority}
		err := unix.SchedSetAttr(0, &attr, 0)
		if err == nil {
			return PriorityRealtime, nil
		}
		refused = fmt.Errorf("realtime scheduling: %w", err)
	}
	if p >= PriorityHigh {
		tid := unix.Gettid()
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err == nil && 20-cur <= highNice { // the kernel returns 20 - nice
			return PriorityHigh, refused // started with a lower nice: keep it
		}
		if err == nil {
			err = unix.Setpriority(unix.PRIO_PROCESS, tid, highNice)
		}
		if err == nil {
			return PriorityHigh, refused
		}
		refused = errors.Join(refused, fmt.Errorf("nice %d: %w", highNice, err))
	}
	return PriorityNormal, refused
}

// goLockedThread runs f on a new goroutine locked to a thread for life,
// as setThreadPriority needs: the thread ends with f, and its priority
// with it. Never the process's main thread: when the goroutine is first
// run there, it keeps that thread locked and idle and runs f on another
// goroutine, which then cannot land there, until f returns. The main
// thread (its id the process's) stands for the process in ps, top, chrt
// and systemd, and takes the signals sent to the process: given a relay
// worker's priority, ps and chrt showed the whole PBX as realtime, and a
// worker that stopped there would leave the main thread wedged (the
// runtime never ends it). It happened in 7 of 17 bin/pbx processes of
// make bench-compare, where the first call starts the workers, and in
// every run of TestRelayKeepsMainThread.
func goLockedThread(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f() // never unlocked
			return
		}
		done := make(chan struct{})
		goLockedThread(func() {
			defer close(done)
			f()
		})
		<-done
		runtime.UnlockOSThread()
	}()
}
