package cdr

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The writes on a call's path (marker, record file, index line) go through
// these thin wrappers of the system calls rather than os.File: os.OpenFile
// also tries to register a regular file with the network poller and sets
// and clears non-blocking mode (three more system calls an open), and
// os.Rename looks the target up first (one more); on a virtual machine a
// system call costs a few microseconds, and a call record makes about
// twenty of them. Errors are *fs.PathError, as os returns.

// sysOpen opens path with flags (O_CLOEXEC added) and mode.
func sysOpen(path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// sysWriteAt writes all of data at offset off of fd (off < 0: at the
// current offset, as an O_APPEND write).
func sysWriteAt(fd int, path string, data []byte, off int64) error {
	for len(data) > 0 {
		var n int
		var err error
		if off < 0 {
			n, err = unix.Write(fd, data)
		} else {
			n, err = unix.Pwrite(fd, data, off)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		if n == 0 {
			return &fs.PathError{Op: "write", Path: path, Err: errors.New("short write")}
		}
		data = data[n:]
		if off >= 0 {
			off += int64(n)
		}
	}
	return nil
}

// sysClose closes fd; a failure means the data may not be written.
func sysClose(fd int, path string) error {
	if err := unix.Close(fd); err != nil && err != unix.EINTR {
		return &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// sysFsync flushes fd's data and metadata to disk.
func sysFsync(fd int, path string) error {
	for {
		err := unix.Fsync(fd)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "sync", Path: path, Err: err}
		}
		return nil
	}
}

// sysRename renames oldpath to newpath.
func sysRename(oldpath, newpath string) error {
	for {
		err := unix.Rename(oldpath, newpath)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "rename", Path: oldpath + " " + newpath, Err: err}
		}
		return nil
	}
}

// noReplaceUnsupported is set once the file system refused
// RENAME_NOREPLACE; renameNoReplaceAt then looks the target up first.
var noReplaceUnsupported atomic.Bool

// renameNoReplaceAt renames old to newpath unless newpath exists, when
// it fails with errCommitted: one system call where a lookup and a rename
// were two (a file system without RENAME_NOREPLACE gets the two).
//
// old is relative to the directory open as odir (AT_FDCWD: the working
// directory); oldpath names it in errors. newpath is renamed to by its
// base name relative to the directory open as ndir, its parent, or
// whole (ndir AT_FDCWD).
func renameNoReplaceAt(odir int, old, oldpath string, ndir int, newpath string) error {
	nname := newpath
	if ndir != unix.AT_FDCWD {
		nname = filepath.Base(newpath)
	}
	for !noReplaceUnsupported.Load() {
		err := renameNoReplace(odir, old, ndir, nname)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EEXIST:
			return &fs.PathError{Op: "rename", Path: newpath, Err: errCommitted}
		case unix.EINVAL, unix.ENOSYS:
			noReplaceUnsupported.Store(true)
		default:
			return &fs.PathError{Op: "rename", Path: oldpath + " " + newpath, Err: err}
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(newpath, &st); err == nil {
		return &fs.PathError{Op: "rename", Path: newpath, Err: errCommitted}
	}
	return sysRenameAt(odir, old, ndir, nname, oldpath, newpath)
}

// sysRenameAt renames old, relative to the directory open as odir, to
// new, relative to ndir (AT_FDCWD: the working directory): no walk of
// the directories' paths; oldpath and newpath name them in errors.
func sysRenameAt(odir int, old string, ndir int, new, oldpath, newpath string) error {
	for {
		err := unix.Renameat(odir, old, ndir, new)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "rename", Path: oldpath + " " + newpath, Err: err}
		}
		return nil
	}
}

// sysOpenAt opens name relative to the directory open as dir (AT_FDCWD:
// the working directory) as sysOpen does; path names it in errors.
func sysOpenAt(dir int, name, path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags|unix.O_CLOEXEC, mode)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}
