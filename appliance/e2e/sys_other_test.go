//go:build !linux

package e2e

import (
	"syscall"
	"testing"
	"time"
)

// The e2e tests run on Linux, where the product ships; these stand-ins
// keep the package compiling (go vet) on a developer's other system.

// mountTmpfs fails: tmpfs mounts are Linux's.
func mountTmpfs(t *testing.T, _ int) string {
	t.Helper()
	t.Fatal("this test mounts a tmpfs, which needs Linux")
	return ""
}

// setNoFile fails: setting another process's limit (prlimit) is Linux's.
func setNoFile(t *testing.T, _ int, _ uint64) {
	t.Helper()
	t.Fatal("this test sets the PBX's descriptor limit with prlimit, which needs Linux")
}

// enableRecvStamps does nothing: without SO_TIMESTAMPNS a connection's
// first read is stamped when it is read, later than its arrival.
func enableRecvStamps(int) error { return nil }

// recvStamp finds no stamp.
func recvStamp(syscall.SocketControlMessage) (time.Time, bool) { return time.Time{}, false }
