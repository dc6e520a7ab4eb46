//go:build unix

package logging

import (
	"os"
	"syscall"
)

// devIno returns the device and inode numbers of an open file.
func devIno(f *os.File) (dev, ino uint64, ok bool) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}
