//go:build !linux

package cdr

// markTopDir does nothing where there is no FS_TOPDIR_FL (chattr +T):
// the flag is only a placement hint for ext4 (see the Linux version).
func markTopDir(string) {}
