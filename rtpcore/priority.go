package rtpcore

import "fmt"

// Priority is how the relay's threads are scheduled against the other
// programs of the host (Options.Priority). A relay thread that waits its
// turn behind them holds every packet that arrives meanwhile, and the
// phones hear the wait as jitter: on a busy host, whole scheduler periods
// of milliseconds. Asterisk (-p) and FreeSWITCH (-rp) run their media
// threads realtime for the same reason.
type Priority int

const (
	// PriorityNormal leaves the relay's threads as the process's others.
	PriorityNormal Priority = iota
	// PriorityHigh gives them a nice value of -10 (highNice): the kernel's
	// fair scheduler still shares the CPU with other programs, in favour
	// of the relay.
	PriorityHigh
	// PriorityRealtime schedules them first-in first-out at a low
	// realtime priority (realtimePriority): a packet's arrival wakes the
	// relay at once, ahead of every ordinary thread. The kernel's realtime
	// throttling (sched_rt_runtime_us) leaves the rest of the host its
	// share even under a flood. Where the host refuses it, the relay asks
	// for PriorityHigh, then keeps PriorityNormal.
	PriorityRealtime
)

// String names p as the configuration does.
func (p Priority) String() string {
	switch p {
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	case PriorityRealtime:
		return "realtime"
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

// ParsePriority reads a Priority by its String.
func ParsePriority(s string) (Priority, error) {
	for p := PriorityNormal; p <= PriorityRealtime; p++ {
		if s == p.String() {
			return p, nil
		}
	}
	return PriorityNormal, fmt.Errorf("relay priority %q: want normal, high or realtime", s)
}
