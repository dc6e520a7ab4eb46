//go:build !linux

package cdr

import "golang.org/x/sys/unix"

// fdatasync flushes fd with fsync(2) where there is no fdatasync(2): it
// writes the times too, which costs more but loses nothing. The product
// ships for Linux; this keeps development builds on other systems.
func fdatasync(fd int) error { return unix.Fsync(fd) }

// syncfs flushes every file system with sync(2) where there is no
// syncfs(2) to flush only the one holding fd.
func syncfs(int) error { return unix.Sync() }

// renameNoReplace is renameat2(2) with RENAME_NOREPLACE, which other
// systems name differently or lack: ENOSYS sends renameNoReplaceAt to its
// look-up-then-rename path.
func renameNoReplace(int, string, int, string) error { return unix.ENOSYS }
