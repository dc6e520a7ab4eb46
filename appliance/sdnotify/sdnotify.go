package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables set by systemd for the main process of a unit.
const (
	envSocket      = "NOTIFY_SOCKET"
	envWatchdogSec = "WATCHDOG_USEC"
	envWatchdogPID = "WATCHDOG_PID"
)

// Enabled reports whether the process was started with a notification socket.
func Enabled() bool {
	return os.Getenv(envSocket) != ""
}

// Send writes one notification (newline-separated KEY=VALUE assignments) to the
// socket named by NOTIFY_SOCKET. It returns nil without sending when the variable
// is unset.
func Send(state string) error {
	name := os.Getenv(envSocket)
	if name == "" {
		return nil
	}
	// Go maps a leading "@" to the abstract namespace (a leading NUL byte).
	if name[0] != '/' && name[0] != '@' {
		return fmt.Errorf("%w: %q", ErrUnsupportedSocket, name)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: dial %s: %w", name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", name, err)
	}
	return nil
}

// Ready tells the service manager that start-up (or a reload) is complete.
func Ready() error { return Send("READY=1") }

// Reloading tells the service manager that the daemon is reloading its
// configuration. It must be followed by Ready once the reload is done, whether it
// succeeded or not.
func Reloading() error {
	state := "RELOADING=1"
	if usec, ok := monotonicUsec(); ok {
		state += "\nMONOTONIC_USEC=" + strconv.FormatUint(usec, 10)
	}
	return Send(state)
}

// Stopping tells the service manager that the daemon has begun shutting down.
func Stopping() error { return Send("STOPPING=1") }

// Status sets the one-line status text that `systemctl status` shows. Newlines
// are replaced by spaces, since they would start a new assignment.
func Status(s string) error {
	return Send("STATUS=" + strings.ReplaceAll(s, "\n", " "))
}

// Watchdog feeds the service watchdog. Call it at half of WatchdogInterval, and
// only while the daemon is healthy: a missed ping is how systemd learns it is not.
func Watchdog() error { return Send("WATCHDOG=1") }

// WatchdogInterval returns the watchdog timeout systemd expects pings within, or
// zero when the watchdog is off or meant for another process (WATCHDOG_PID names a
// different pid).
func WatchdogInterval() time.Duration {
	usec, err := strconv.ParseUint(os.Getenv(envWatchdogSec), 10, 63)
	if err != nil || usec == 0 {
		return 0
	}
	if pid := os.Getenv(envWatchdogPID); pid != "" {
		p, err := strconv.Atoi(pid)
		if err != nil || p != os.Getpid() {
			return 0
		}
	}
	return time.Duration(usec) * time.Microsecond
}
