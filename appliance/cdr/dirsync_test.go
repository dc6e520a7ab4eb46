package cdr

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heldDirs is how many day directories s holds open for renames.
func heldDirs(s *Store) int {
	s.dirSyncs.mu.Lock()
	defer s.dirSyncs.mu.Unlock()
	return len(s.dirSyncs.held)
}

// TestRecordRenamedIntoDayDirMadeAgain checks that record files are
// renamed into their day directory held open, and that a day directory
// removed and made again after a commit gets the next record: the rename
// into the removed one fails, and the directory is opened again.
func TestRecordRenamedIntoDayDirMadeAgain(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 12, 30, 0, time.UTC)
	first := call("acme", start, true, "+15551230001", "+15559870002")
	answerCommit(t, s, first)
	day := filepath.Join(s.root, "acme", "cdr", "2026", "11", "21")
	if _, err := os.Stat(filepath.Join(day, string(first.ID)+".json")); err != nil {
		t.Fatal(err)
	}
	// The first record made the day directory; the second is renamed
	// into it held open.
	second := call("acme", start.Add(time.Second), true, "+15551230001", "+15559870002")
	answerCommit(t, s, second)
	if _, err := os.Stat(filepath.Join(day, string(second.ID)+".json")); err != nil {
		t.Fatal(err)
	}
	if n := heldDirs(s); n != 1 {
		t.Fatalf("%d day directories held open, want 1", n)
	}
	if err := os.RemoveAll(day); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(day, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r := call("acme", start.Add(time.Duration(i+1)*time.Minute), true, "+15551230001", "+15559870002")
		answerCommit(t, s, r)
		got, err := readRecord(filepath.Join(day, string(r.ID)+".json"))
		if err != nil || got.ID != r.ID {
			t.Fatalf("record %d in the day directory made again: %v %+v", i, err, got)
		}
	}
	if n := heldDirs(s); n != 1 {
		t.Fatalf("%d day directories held open, want 1", n)
	}
	// The directory held open is the one made again, not the removed one.
	d := s.dirSyncs.of(day)
	d.ns.Lock()
	fd := d.fd
	var held, made unix.Stat_t
	err := unix.Fstat(fd, &held)
	d.ns.Unlock()
	if err != nil {
		t.Fatalf("held directory %d: %v", fd, err)
	}
	if err := unix.Stat(day, &made); err != nil {
		t.Fatal(err)
	}
	if held.Ino != made.Ino || held.Nlink == 0 {
		t.Fatalf("held directory inode %d (links %d), the day directory's %d", held.Ino, held.Nlink, made.Ino)
	}
}

// TestDayDirsHeldOpenBounded checks that at most maxDirFDs day
// directories stay open, and that the records of every day are in place.
func TestDayDirsHeldOpenBounded(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := range maxDirFDs + 3 {
		for j := range 2 { // the first makes the directory
			r := call("acme", start.AddDate(0, 0, i).Add(time.Duration(j)*time.Second), true, "+15551230001", "+15559870002")
			answerCommit(t, s, r)
			if _, err := os.Stat(s.RecordPath("acme", r.ID, r.Start)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := heldDirs(s); n != maxDirFDs {
		t.Fatalf("%d day directories held open, want %d", n, maxDirFDs)
	}
}

// answerCommit writes r's marker, then commits it, as the call log does
// for an answered call (the marker's write makes the in-flight directory
// whose spares record files are written into).
func answerCommit(t *testing.T, s *Store, r *Record) {
	t.Helper()
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	commit(t, s, r)
}
