// Package sdnotify tells the service manager (systemd) how the daemon is doing, over
// the datagram socket named by NOTIFY_SOCKET, as sd_notify(3) describes.
//
// The daemon sends Ready once every listener is bound, Reloading before and Ready
// after a SIGHUP reload, Stopping when it starts to drain, Status for a one-line
// human summary that `systemctl status` shows, and Watchdog at half of
// WatchdogInterval while it is healthy. Every function is a no-op that returns nil
// when NOTIFY_SOCKET is unset, so the same code runs on a terminal, in a container
// and under systemd.
//
// The package owns the wire format and nothing else: it does not decide when the
// daemon is ready or healthy, and it starts no goroutine (the watchdog ticker
// belongs to the caller, which must stop feeding it when it is no longer healthy).
//
// Caveats: only Unix datagram sockets are supported (a path, or an abstract name
// starting with "@"); the vsock form of NOTIFY_SOCKET is refused with
// ErrUnsupportedSocket. Reloading carries MONOTONIC_USEC, which systemd 253 and
// later require for Type=notify-reload and older versions ignore.
package sdnotify
