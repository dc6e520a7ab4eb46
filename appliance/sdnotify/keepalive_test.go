package sdnotify

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// count reads WATCHDOG=1 datagrams until the socket has been quiet for a while.
func count(t *testing.T, conn *net.UnixConn, quiet time.Duration) int {
	t.Helper()
	n := 0
	buf := make([]byte, 64)
	for range 1000 {
		if err := conn.SetReadDeadline(time.Now().Add(quiet)); err != nil {
			t.Fatal(err)
		}
		m, err := conn.Read(buf)
		if err != nil {
			return n
		}
		if string(buf[:m]) != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", buf[:m])
		}
		n++
	}
	t.Fatal("more than 1000 pings")
	return n
}

func TestKeepAlive(t *testing.T) {
	const interval = 200 * time.Millisecond
	tests := []struct {
		name     string
		healthy  func() bool
		min, max int
	}{
		// Pings at 0, 100, 200, ... ms over 550 ms: six, give or take scheduling.
		{"healthy", func() bool { return true }, 4, 7},
		{"nil means healthy", nil, 4, 7},
		{"unhealthy", func() bool { return false }, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := listen(t, false)
			t.Setenv(envWatchdogSec, strconv.FormatInt(interval.Microseconds(), 10))
			t.Setenv(envWatchdogPID, "")
			ctx, cancel := context.WithTimeout(context.Background(), 550*time.Millisecond)
			defer cancel()
			if err := KeepAlive(ctx, tt.healthy); err != nil {
				t.Fatal(err)
			}
			if n := count(t, conn, 50*time.Millisecond); n < tt.min || n > tt.max {
				t.Fatalf("%d pings, want %d to %d", n, tt.min, tt.max)
			}
		})
	}
}

// countFor counts WATCHDOG=1 datagrams arriving within window.
func countFor(t *testing.T, conn *net.UnixConn, window time.Duration) int {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(window)); err != nil {
		t.Fatal(err)
	}
	n := 0
	buf := make([]byte, 64)
	for range 1000 {
		if _, err := conn.Read(buf); err != nil {
			return n
		}
		n++
	}
	return n
}

// TestKeepAliveStopsFeedingWhenUnhealthy checks that pings stop as soon as the
// daemon reports trouble, which is what lets systemd restart it, and resume when
// it recovers.
func TestKeepAliveStopsFeedingWhenUnhealthy(t *testing.T) {
	conn := listen(t, false)
	t.Setenv(envWatchdogSec, "100000") // 100ms: a ping every 50ms
	var ok atomic.Bool
	ok.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- KeepAlive(ctx, ok.Load) }()
	defer func() {
		cancel()
		<-done
	}()

	if n := countFor(t, conn, 300*time.Millisecond); n < 3 {
		t.Fatalf("%d pings in 300ms while healthy, want about 6", n)
	}
	ok.Store(false)
	countFor(t, conn, 60*time.Millisecond) // a ping already on its way
	if n := countFor(t, conn, 300*time.Millisecond); n != 0 {
		t.Fatalf("%d pings in 300ms while unhealthy, want none", n)
	}
	ok.Store(true)
	if n := countFor(t, conn, 300*time.Millisecond); n < 3 {
		t.Fatalf("%d pings in 300ms after recovering, want about 6", n)
	}
}

func TestKeepAliveOff(t *testing.T) {
	conn := listen(t, false)
	t.Setenv(envWatchdogSec, "")
	start := time.Now()
	if err := KeepAlive(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("KeepAlive blocked for %v with the watchdog off", d)
	}
	if n := count(t, conn, 50*time.Millisecond); n != 0 {
		t.Fatalf("%d pings with the watchdog off", n)
	}
}
