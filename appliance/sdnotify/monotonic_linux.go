package sdnotify

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is CLOCK_MONOTONIC from <time.h>, the clock systemd reads
// MONOTONIC_USEC against.
const clockMonotonic = 1

// monotonicUsec reads CLOCK_MONOTONIC in microseconds.
func monotonicUsec() (uint64, bool) {
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0, false
	}
	return uint64(ts.Sec)*1_000_000 + uint64(ts.Nsec)/1_000, true
}
