package cdr

import "golang.org/x/sys/unix"

// fdatasync flushes fd's data and the metadata needed to read it back
// (fdatasync(2)), not its times.
func fdatasync(fd int) error { return unix.Fdatasync(fd) }

// syncfs flushes the whole file system holding the open file fd
// (syncfs(2)).
func syncfs(fd int) error { return unix.Syncfs(fd) }
