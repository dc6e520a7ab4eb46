package sdnotify

import "errors"

// ErrUnsupportedSocket is returned when NOTIFY_SOCKET names something other than a
// Unix socket path or an abstract socket name (for example a vsock address).
var ErrUnsupportedSocket = errors.New("sdnotify: unsupported NOTIFY_SOCKET address")
