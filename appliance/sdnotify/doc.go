// Package sdnotify tells the service manager (systemd) how the daemon is doing, over
// the datagram socket named by NOTIFY_SOCKET, as sd_notify(3) describes.
//
// The daemon sends Ready once every listener is bound, Reloading before and Ready
// after a SIGHUP reload, Stopping when it starts to drain, and Status for a one-line
// human summary that `systemctl status` shows. KeepAlive feeds the watchdog
// (WatchdogSec= in the unit) at half of WatchdogInterval while a health check the
// daemon supplies says so. Every function is a no-op that returns nil when
// NOTIFY_SOCKET is unset, so the same code runs on a terminal, in a container and
// under systemd.
//
// The package owns the wire format and nothing else: it does not decide when the
// daemon is ready or healthy, and it starts no goroutine (KeepAlive blocks; the
// daemon runs it in the errgroup that owns its other loops).
//
// A unit with WatchdogSec= kills a daemon that never calls KeepAlive (or Watchdog)
// once the interval passes.
//
// Caveats: only Unix datagram sockets are supported (a path, or an abstract name
// starting with "@"); the vsock form of NOTIFY_SOCKET is refused with
// ErrUnsupportedSocket. Reloading carries MONOTONIC_USEC, which systemd 253 and
// later require for Type=notify-reload and older versions ignore.
package sdnotify
