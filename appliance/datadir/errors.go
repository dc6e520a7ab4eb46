package datadir

import "errors"

// ErrLocked is returned by Lock when another process holds the data
// directory, normally the running PBX daemon.
var ErrLocked = errors.New("the PBX daemon is running and holds the data directory")
