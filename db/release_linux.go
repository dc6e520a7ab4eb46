package db

import (
	"fmt"
	"os"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// ReleaseMapped drops the database file's pages from the process's memory
// map (madvise MADV_DONTNEED on bbolt's read-only shared mapping): they
// stay in the page cache and a later read maps them again. bbolt reads
// every page it touches through the map, so after a REGISTER load (whose
// bindings are written every flush) several megabytes of the file count in
// the process's resident and proportional set sizes until it exits. The
// read transaction keeps bbolt from remapping the file meanwhile.
func (d *DB) ReleaseMapped() error {
	return d.bolt.View(func(tx *bolt.Tx) error {
		page := int64(os.Getpagesize())
		n := (tx.Size() + page - 1) / page * page
		if n <= 0 {
			return nil
		}
		base := d.bolt.Info().Data
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, base, uintptr(n), syscall.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("release database pages: %w", errno)
		}
		return nil
	})
}
