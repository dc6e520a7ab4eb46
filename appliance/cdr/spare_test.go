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

// TestRetiredMarkerRenamedToNext: the marker of a call committed by the
// committer is retired, not removed at once; the next answered call's
// marker is written into its file and renamed from its name (the same
// inode, no spare name used, the old name gone), and reads whole. A
// retired marker no marker takes is removed by the committer's second
// round after it (left a spare), and Flush returns only then.
func TestRetiredMarkerRenamedToNext(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	warmUp(t, s, start.Add(-time.Hour))
	a := call("acme", start, true, "100", strings.Repeat("9", 30))
	if err := s.Answered(a); err != nil {
		t.Fatal(err)
	}
	ma := s.MarkerPath("acme", a.ID)
	ino := inodeOf(ma)
	if err := s.spares.retire(ma); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ma); err != nil {
		t.Fatalf("retired marker removed at once: %v", err)
	}
	s.spares.mu.Lock()
	made0 := s.spares.dir(s.inflightDir("acme")).made
	s.spares.mu.Unlock()
	b := call("acme", start.Add(time.Second), true, "100", "200")
	if err := s.Answered(b); err != nil {
		t.Fatal(err)
	}
	mb := s.MarkerPath("acme", b.ID)
	if _, err := os.Stat(ma); !os.IsNotExist(err) {
		t.Fatalf("retired marker still under its name: %v", err)
	}
	if got := inodeOf(mb); got != ino || ino == 0 {
		t.Fatalf("next marker in inode %d, want the retired marker's %d", got, ino)
	}
	if got, err := readRecord(mb); err != nil || got.ID != b.ID || got.To != b.To {
		t.Fatalf("next marker: %v %+v", err, got)
	}
	s.spares.mu.Lock()
	made := s.spares.dir(s.inflightDir("acme")).made
	s.spares.mu.Unlock()
	if made != made0 {
		t.Fatalf("%d spare names made, want none", made-made0)
	}

	// Committed through the committer: retired, then removed by a later
	// round with nothing to take it; Flush waits for that.
	s.CommitThen(b, func(err error) {
		if err != nil {
			t.Error(err)
		}
	})
	s.Flush()
	committedOnce(t, s, b)
	if n := markersIn(t, s.inflightDir("acme")); n != 0 {
		t.Fatalf("%d markers left after Flush, want the retired one removed", n)
	}
}

// TestRetiredAgesOut: a retired marker survives the committer's next
// round (a marker may still take it) and is removed by the one after.
func TestRetiredAgesOut(t *testing.T) {
	s := newTestStore(t, nil, nil)
	warmUp(t, s, time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC))
	a := call("acme", time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC), true, "100", "200")
	if err := s.Answered(a); err != nil {
		t.Fatal(err)
	}
	ma := s.MarkerPath("acme", a.ID)
	if err := s.spares.retire(ma); err != nil {
		t.Fatal(err)
	}
	if !s.spares.ageRetired() {
		t.Fatal("first round: no retired marker left")
	}
	if _, err := os.Stat(ma); err != nil {
		t.Fatalf("first round removed the retired marker: %v", err)
	}
	if s.spares.ageRetired() {
		t.Fatal("second round: retired markers still left")
	}
	if _, err := os.Stat(ma); !os.IsNotExist(err) {
		t.Fatalf("second round left the retired marker: %v", err)
	}
	s.spares.mu.Lock()
	ready := len(s.spares.dir(s.inflightDir("acme")).ready)
	s.spares.mu.Unlock()
	if ready != 1 { // the warm-up call's went to this one's marker
		t.Fatalf("%d spares ready, want the retired marker parked", ready)
	}
}

// TestRecoverMarkerUnderRetiredName: a process killed between writing a
// call's marker into a retired marker (of a committed call) and renaming
// it leaves that call's record under the committed call's name; recovery
// promotes it as its own call's marker and removes the file.
func TestRecoverMarkerUnderRetiredName(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	a := call("acme", start, true, "100", "200")
	commit(t, s, a)
	b := call("acme", start.Add(time.Minute), true, "100", "300")
	b.End, b.Cause = time.Time{}, ""
	b.SIPStatus, b.DurationMS, b.BillMS = 0, 0, 0
	dir := s.inflightDir("acme")
	if err := ensureDir(dir); err != nil {
		t.Fatal(err)
	}
	n := b.normalize()
	data, err := appendRecord(nil, &n)
	if err != nil {
		t.Fatal(err)
	}
	under := s.MarkerPath("acme", a.ID)
	if err := os.WriteFile(under, data, 0o640); err != nil {
		t.Fatal(err)
	}
	acts, err := s.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 1 || acts[0].Kind != ActPromoted || acts[0].ID != b.ID {
		t.Fatalf("recovery: %v, want %s promoted", acts, b.ID)
	}
	got, err := readRecord(s.RecordPath("acme", b.ID, b.Start))
	if err != nil || !got.Incomplete || got.To != "300" {
		t.Fatalf("promoted record: %v %+v", err, got)
	}
	if n := markersIn(t, dir); n != 0 {
		t.Fatalf("%d markers left", n)
	}
	committedOnce(t, s, a)
}

// warmUp answers and commits a call at start, so that the tenant's
// in-flight directory exists: the first marker is written the ordinary
// way, its file not held.
func warmUp(t *testing.T, s *Store, start time.Time) {
	t.Helper()
	r := call("acme", start, true, "100", "200")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	commit(t, s, r)
}
