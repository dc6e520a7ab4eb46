package e2e

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory and unmounts
// it when the test ends (after the PBX, whose cleanup registers later). It
// fails, never skips, when the test does not run as root.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs and must run as root (CI runs the e2e tests as root): sudo -E go test ./appliance/e2e -run Chaos")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// setNoFile sets the descriptor limit (soft and hard) of process pid, as
// prlimit(1) does.
func setNoFile(t *testing.T, pid int, n uint64) {
	t.Helper()
	lim := syscall.Rlimit{Cur: n, Max: n}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(syscall.RLIMIT_NOFILE), uintptr(unsafe.Pointer(&lim)), 0, 0, 0); errno != 0 {
		t.Fatalf("prlimit %d nofile %d: %v", pid, n, errno)
	}
}

// enableRecvStamps asks the kernel to stamp each segment the socket fd
// (and every socket it accepts) receives with its arrival (SO_TIMESTAMPNS).
func enableRecvStamps(fd int) error {
	return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
}

// recvStamp reads the arrival stamp from a control message of a socket
// with enableRecvStamps.
func recvStamp(m syscall.SocketControlMessage) (time.Time, bool) {
	if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SO_TIMESTAMPNS || len(m.Data) < 16 {
		return time.Time{}, false
	}
	return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:]))), true
}
