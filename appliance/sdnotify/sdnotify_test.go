package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen binds a real datagram socket and points NOTIFY_SOCKET at it.
func listen(t *testing.T, abstract bool) *net.UnixConn {
	t.Helper()
	var name string
	if abstract {
		name = fmt.Sprintf("@pbx-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	} else {
		dir, err := os.MkdirTemp("", "sdn")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		name = filepath.Join(dir, "notify")
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv(envSocket, name)
	return conn
}

// receive reads one datagram, failing the test after a deadline.
func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("read notification: %v", err)
	}
	return string(buf[:n])
}

func TestMessages(t *testing.T) {
	tests := []struct {
		name string
		send func() error
		want string
	}{
		{"ready", Ready, "READY=1"},
		{"stopping", Stopping, "STOPPING=1"},
		{"watchdog", Watchdog, "WATCHDOG=1"},
		{"status", func() error { return Status("3 calls\nactive") }, "STATUS=3 calls active"},
		{"raw", func() error { return Send("READY=1\nSTATUS=up") }, "READY=1\nSTATUS=up"},
	}
	for _, abstract := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/abstract=%v", tt.name, abstract), func(t *testing.T) {
				conn := listen(t, abstract)
				if !Enabled() {
					t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
				}
				if err := tt.send(); err != nil {
					t.Fatalf("send: %v", err)
				}
				if got := receive(t, conn); got != tt.want {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			})
		}
	}
}

// TestReloadingMonotonic checks that MONOTONIC_USEC is read from CLOCK_MONOTONIC:
// never ahead of the boot-time clock in /proc/uptime (which also counts suspend),
// and not from the wall clock, which would be decades ahead of it.
func TestReloadingMonotonic(t *testing.T) {
	conn := listen(t, false)
	if err := Reloading(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, conn)
	lines := strings.Split(got, "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
		t.Fatalf("got %q, want RELOADING=1 and MONOTONIC_USEC", got)
	}
	usec, err := strconv.ParseUint(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
	if err != nil {
		t.Fatalf("MONOTONIC_USEC: %v", err)
	}
	raw, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatalf("read /proc/uptime: %v", err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	if usec == 0 || float64(usec) > (up+1)*1e6 {
		t.Fatalf("MONOTONIC_USEC=%d, uptime %.2fs: not CLOCK_MONOTONIC", usec, up)
	}
	second, _ := monotonicUsec()
	if second < usec {
		t.Fatalf("clock went backwards: %d then %d", usec, second)
	}
}

func TestNoSocketIsNoop(t *testing.T) {
	t.Setenv(envSocket, "")
	if Enabled() {
		t.Fatal("Enabled() = true without NOTIFY_SOCKET")
	}
	for _, f := range []func() error{Ready, Reloading, Stopping, Watchdog} {
		if err := f(); err != nil {
			t.Fatalf("want nil without NOTIFY_SOCKET, got %v", err)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Run("vsock", func(t *testing.T) {
		t.Setenv(envSocket, "vsock:2:1234")
		if err := Ready(); !errors.Is(err, ErrUnsupportedSocket) {
			t.Fatalf("got %v, want ErrUnsupportedSocket", err)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		t.Setenv(envSocket, filepath.Join(t.TempDir(), "absent"))
		if err := Ready(); err == nil {
			t.Fatal("want an error when the socket does not exist")
		}
	})
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		name, usec, pid string
		want            time.Duration
	}{
		{"unset", "", "", 0},
		{"set", "30000000", "", 30 * time.Second},
		{"for this pid", "20000000", self, 20 * time.Second},
		{"for another pid", "20000000", "1", 0},
		{"bad pid", "20000000", "x", 0},
		{"zero", "0", "", 0},
		{"garbage", "10s", "", 0},
		{"negative", "-5", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envWatchdogSec, tt.usec)
			t.Setenv(envWatchdogPID, tt.pid)
			if got := WatchdogInterval(); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
