package cdr

import (
	"golang.org/x/sys/unix"
)

// fsTopDirFL is FS_TOPDIR_FL (chattr +T): the directory is the top of
// unrelated hierarchies, whose subdirectories ext4's Orlov allocator
// spreads to block groups with few directories and much free space
// instead of keeping them beside their parent.
const fsTopDirFL = 0x00020000

// markTopDir asks the file system to place the subdirectories of dir (a
// tenant's cdr directory: the years, inflight; an in-flight directory:
// its stock directories, spare.go) away from its parent's block group, a
// hint that file systems without it ignore.
//
// Why: creating a file is the largest cost of a call record on ext4
// without a journal, which skips every inode freed in the last seconds
// (minutes while the inode table is not yet written back) and rereads the
// inode table for each while it looks for a free one. A data directory in
// a block group where other files are created and removed (a shared /var,
// a /tmp; the retention janitor removing a day) made each record file
// cost about 300 us of kernel time instead of 50 us on the reference
// machine (BenchmarkAnsweredCommit with PBX_BENCH_CDR_DIR on /tmp).
func markTopDir(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil || flags&fsTopDirFL != 0 {
		return
	}
	_ = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopDirFL))
}
