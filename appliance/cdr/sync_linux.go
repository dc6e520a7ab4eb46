package cdr

import "golang.org/x/sys/unix"

// fdatasync flushes fd's data and the metadata needed to read it back
// (fdatasync(2)), not its times.
func fdatasync(fd int) error { return unix.Fdatasync(fd) }

// syncfs flushes the whole file system holding the open file fd
// (syncfs(2)).
func syncfs(fd int) error { return unix.Syncfs(fd) }

// renameNoReplace renames old (relative to odir) to new (relative to ndir)
// unless new exists (EEXIST).
func renameNoReplace(odir int, old string, ndir int, new string) error {
	return unix.Renameat2(odir, old, ndir, new, unix.RENAME_NOREPLACE)
}
