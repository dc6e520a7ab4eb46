//go:build !linux

package sdnotify

// monotonicUsec reports no value outside Linux, where there is no systemd to read it.
func monotonicUsec() (uint64, bool) { return 0, false }
