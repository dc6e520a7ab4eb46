package cdr

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestLimitHit: the backlog's log line names the limit a write hit, through
// the wrapping of the store's errors, and nothing for other failures.
func TestLimitHit(t *testing.T) {
	wrap := func(errno syscall.Errno) error {
		return fmt.Errorf("write marker x: %w", &fs.PathError{Op: "open", Path: "/d/x.json.tmp", Err: errno})
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{wrap(syscall.EMFILE), "RLIMIT_NOFILE"},
		{wrap(syscall.ENFILE), "fs.file-max"},
		{wrap(syscall.ENOSPC), "disk full"},
		{wrap(syscall.EDQUOT), "quota"},
	} {
		if got := limitHit(c.err); !strings.Contains(got, c.want) {
			t.Errorf("limitHit(%v) = %q, want it to name %q", c.err, got, c.want)
		}
	}
	for _, err := range []error{nil, wrap(syscall.EIO), os.ErrNotExist} {
		if got := limitHit(err); got != "" {
			t.Errorf("limitHit(%v) = %q, want none", err, got)
		}
	}
}
