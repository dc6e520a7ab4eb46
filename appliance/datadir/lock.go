package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// FileName is the name of the lock file inside the data directory.
const FileName = "pbx.lock"

// Held is an exclusive hold on a data directory, returned by Lock.
type Held struct {
	f    *os.File
	path string
}

// Lock takes the exclusive lock on <dir>/pbx.lock without waiting. The file is
// created when missing (the directory must exist). When another process holds
// the lock the error wraps ErrLocked and names the directory.
func Lock(dir string) (*Held, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is informational only: the kernel lock is the truth.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Held{f: f, path: path}, nil
}

// Path is the lock file's path.
func (l *Held) Path() string { return l.path }

// Unlock releases the lock. The lock file stays in place. Unlock on an
// already released lock does nothing.
func (l *Held) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	cerr := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	if cerr != nil {
		return fmt.Errorf("close %s: %w", l.path, cerr)
	}
	return nil
}
