package cdr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// inodeOf is the inode number of path (0 when it cannot be read).
func inodeOf(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// TestMarkerFilesReused: a committed call's marker file becomes a spare
// that the next answered call's marker is written over, so one call after
// another allocate no new marker inode; each marker still reads whole
// (each is shorter than the one before, so one not cut to length would
// carry the tail of the previous: it is padded with spaces to the file's
// length instead, not cut, also when no file is kept open between uses),
// and recovery removes spares without reporting them.
func TestMarkerFilesReused(t *testing.T) {
	for _, open := range []int{0, -1} {
		t.Run(fmt.Sprintf("maxOpenFiles=%d", open), func(t *testing.T) { testMarkerFilesReused(t, open) })
	}
}

func testMarkerFilesReused(t *testing.T, maxOpen int) {
	s := newTestStore(t, nil, func(o *Options) { o.MaxOpenFiles = maxOpen })
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	inodes := map[uint64]bool{}
	sizes := map[uint64]int64{} // the length of each inode's last marker
	for i := range 20 {
		r := call("acme", start.Add(time.Duration(i)*time.Second), true, "100", strings.Repeat("9", 40-i))
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		m := s.MarkerPath("acme", r.ID)
		got, err := readRecord(m)
		if err != nil || got.ID != r.ID || got.To != r.To {
			t.Fatalf("marker %d: %v %+v", i, err, got)
		}
		ino := inodeOf(m)
		inodes[ino] = true
		fi, err := os.Stat(m)
		if err != nil {
			t.Fatal(err)
		}
		// The first marker is written the ordinary way (no in-flight
		// directory yet), its file not kept open: the second is cut to
		// length, not padded.
		if prev, ok := sizes[ino]; ok && i >= 2 && fi.Size() != prev {
			t.Fatalf("marker %d: %d bytes in a spare of %d, want it padded to the spare's length", i, fi.Size(), prev)
		}
		sizes[ino] = fi.Size()
		commit(t, s, r)
		committedOnce(t, s, r)
		if _, err := os.Stat(m); !os.IsNotExist(err) {
			t.Fatalf("marker %d left: %v", i, err)
		}
	}
	if len(inodes) > 2 {
		t.Fatalf("20 calls one after another used %d marker inodes, want the first one or two reused", len(inodes))
	}
	es, _ := os.ReadDir(s.inflightDir("acme"))
	es = slices.DeleteFunc(es, func(e os.DirEntry) bool { return e.IsDir() }) // the stock directory
	if len(es) != 1 || !strings.HasPrefix(es[0].Name(), spareName) {
		t.Fatalf("in-flight directory after the calls: %v, want one spare", es)
	}
	acts, err := s.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 0 {
		t.Fatalf("recovery reported %v", acts)
	}
	if es, _ := os.ReadDir(s.inflightDir("acme")); len(es) != 0 {
		t.Fatalf("recovery left %v", es)
	}
	// The spare the store still counts on is gone: the next marker is
	// written the ordinary way.
	r := call("acme", start.Add(time.Hour), true, "100", "300")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	if got, err := readRecord(s.MarkerPath("acme", r.ID)); err != nil || got.ID != r.ID {
		t.Fatalf("marker after recovery: %v %+v", err, got)
	}
	commit(t, s, r)
}

// TestMarkerRewrittenWhileHeld: a marker rewritten (Answered again) is
// the new version; the marker files stay open between calls (spares.held,
// parked), and each later call's marker, longer and shorter in turn,
// reads whole, with no byte of another call's.
func TestMarkerRewrittenWhileHeld(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	for i := range 12 {
		to := strings.Repeat("9", 10+(i%3)*15)
		r := call("acme", start.Add(time.Duration(i)*time.Second), true, "100", to)
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		r.To = to + "1234567"
		if i%2 == 1 {
			r.To = to[:5]
		}
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		m := s.MarkerPath("acme", r.ID)
		got, err := readRecord(m)
		if err != nil || got.ID != r.ID || got.To != r.To {
			t.Fatalf("call %d: marker %v %+v, want to %s", i, err, got, r.To)
		}
		s.CommitThen(r, func(err error) {
			if err != nil {
				t.Error(err)
			}
		})
		s.Flush()
		committedOnce(t, s, r)
		if _, err := os.Stat(m); !os.IsNotExist(err) {
			t.Fatalf("call %d: marker left: %v", i, err)
		}
	}
	s.spares.mu.Lock()
	held, open := len(s.spares.held), s.spares.open
	s.spares.mu.Unlock()
	if held != 0 || open == 0 || open > DefaultMaxOpenFiles {
		t.Fatalf("after the calls: %d markers held, %d files open; want none held, the parked ones open", held, open)
	}
}

// TestStockRotatesOnSlowCreations: a refill whose creations are slow
// (here: any) moves the stock to a new directory, at most maxRotations
// times; spares made in the directories given up still become record
// files, each committed once.
func TestStockRotatesOnSlowCreations(t *testing.T) {
	oldSlow, oldEvery := slowCreate, rotateEvery
	slowCreate, rotateEvery = 0, 0
	defer func() { slowCreate, rotateEvery = oldSlow, oldEvery }()
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	var recs []*Record
	for i := range 3 * (maxRotations + 2) {
		r := call("acme", start.Add(time.Duration(i)*time.Second), false, "100", "200")
		s.CommitThen(r, func(err error) {
			if err != nil {
				t.Error(err)
			}
		})
		s.Flush() // a batch, and a refill, a commit
		recs = append(recs, r)
	}
	for _, r := range recs {
		committedOnce(t, s, r)
	}
	stocks, _ := filepath.Glob(filepath.Join(s.inflightDir("acme"), stockDir+"-*"))
	if len(stocks) < 2 || len(stocks) > maxRotations+1 {
		t.Fatalf("%d stock directories, want 2..%d", len(stocks), maxRotations+1)
	}
}
