package datadir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLockExclusive(t *testing.T) {
	dir := t.TempDir()
	l, err := Lock(dir)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatalf("lock file: %v", err)
	}
	// A second open file description conflicts even inside one process.
	_, err = Lock(dir)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: got %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), "daemon is running") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("message does not say who holds what: %q", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("second unlock: %v", err)
	}
	l2, err := Lock(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	defer l2.Unlock()
}

func TestLockMissingDir(t *testing.T) {
	_, err := Lock(filepath.Join(t.TempDir(), "absent"))
	if err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want an open error", err)
	}
}

// TestLockOtherProcess holds the lock in a child process (this test binary
// re-executed) and checks that
// the lock is refused while it lives and free once it exits.
func TestLockOtherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHold$")
	cmd.Env = append(os.Environ(), "PBX_DATADIR_HOLD="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := stdout.Read(buf); err != nil || string(buf[:4]) != "held" {
		t.Fatalf("child did not report the lock: %q %v", buf, err)
	}
	if _, err := Lock(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("lock while child holds it: %v", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := Lock(dir)
		if err == nil {
			l.Unlock()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock not released after child exit: %v", err)
		}
	}
}

// TestHelperHold is the child side of TestLockOtherProcess.
func TestHelperHold(t *testing.T) {
	dir := os.Getenv("PBX_DATADIR_HOLD")
	if dir == "" {
		return
	}
	l, err := Lock(dir)
	if err != nil {
		os.Stdout.WriteString("error\n")
		os.Exit(3)
	}
	os.Stdout.WriteString("held\n")
	b := make([]byte, 1)
	os.Stdin.Read(b) // until the parent closes stdin
	l.Unlock()
	os.Exit(0)
}
