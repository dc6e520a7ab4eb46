//go:build !unix

package logging

import "os"

// devIno reports nothing where files have no device and inode numbers.
func devIno(*os.File) (dev, ino uint64, ok bool) { return 0, 0, false }
