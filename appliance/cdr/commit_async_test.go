package cdr

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCommitThenDoesNotWaitForTheSync: while the commit journal's fdatasync
// cannot run (its lock held, as by a slow disk), CommitThen still returns
// with the record file in place, and done comes only once the sync has run;
// the record is then indexed and its marker gone.
func TestCommitThenDoesNotWaitForTheSync(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	commit(t, s, call("acme", start, false, "+15551230001", "+15559870002")) // opens the journal
	j := s.journal.Load()
	if j == nil {
		t.Fatal("journal not open")
	}
	r := call("acme", start.Add(time.Second), true, "+15551230001", "+15559870002")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	j.smu.Lock() // no fdatasync can start or finish
	done := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		s.CommitThen(r, func(err error) { done <- err })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		j.smu.Unlock()
		t.Fatal("CommitThen waited for the journal's fdatasync")
	}
	if _, err := os.Stat(s.RecordPath(r.Tenant, r.ID, r.Start)); err != nil {
		j.smu.Unlock()
		t.Fatalf("record file not in place when CommitThen returned: %v", err)
	}
	select {
	case err := <-done:
		j.smu.Unlock()
		t.Fatalf("done before the record was durable (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	synced := j.syncs.Load()
	j.smu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("done never called")
	}
	if j.syncs.Load() <= synced {
		t.Fatal("done called without an fdatasync of the journal")
	}
	committedOnce(t, s, r)
	// The call waited for its marker and its record file, not for the
	// sync: the commit's time (until done) includes the 50 ms the sync
	// was held, the call's wait for the record file does not.
	st := s.Stats()
	if n := sum(st.Marker.Counts[:]); n != 1 || st.Marker.Sum <= 0 {
		t.Errorf("marker waits %+v, want one", st.Marker)
	}
	if n := sum(st.Record.Counts[:]); n != 1 || st.Record.Sum <= 0 || st.Record.Sum >= st.Commit.Sum-st.Commit.Sum/2 {
		t.Errorf("record file waits %+v against commits %+v: want one, shorter than the commit", st.Record, st.Commit)
	}
}

func sum(counts []uint64) (n uint64) {
	for _, c := range counts {
		n += c
	}
	return n
}

// TestCommitThenBatch: calls ending at once are each committed once, their
// index lines whole (appended a day file at a time), in two days, and
// Flush returns only once every done has run.
func TestCommitThenBatch(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 23, 59, 0, 0, time.UTC)
	const n = 200
	recs := make([]*Record, n)
	for i := range recs {
		recs[i] = call("acme", start.Add(time.Duration(i)*time.Second), i%2 == 0, "+15551230001", "+15559870002")
		if i%2 == 0 {
			if err := s.Answered(recs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	dones := 0
	var wg sync.WaitGroup
	for i := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.CommitThen(recs[i], func(err error) {
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				dones++
				mu.Unlock()
			})
		}()
	}
	wg.Wait()
	s.Flush()
	mu.Lock()
	got := dones
	mu.Unlock()
	if got != n {
		t.Fatalf("%d dones after Flush, want %d", got, n)
	}
	for _, r := range recs {
		committedOnce(t, s, r)
	}
	if st := s.Stats(); st.Commits != n {
		t.Fatalf("stats count %d commits, want %d", st.Commits, n)
	}
}

// TestCommitThenTwice: a record committed already is refused, at once.
func TestCommitThenTwice(t *testing.T) {
	s := newTestStore(t, nil, nil)
	r := call("acme", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), false, "+15551230001", "+15559870002")
	commit(t, s, r)
	var got error
	s.CommitThen(r, func(err error) { got = err })
	if !errors.Is(got, ErrCommitted) {
		t.Fatalf("second commit: %v, want ErrCommitted", got)
	}
	// With spares stocked, the record file is renamed from one without a
	// lookup first: the rename refuses to replace the committed file.
	r2 := call("acme", time.Date(2026, 11, 21, 12, 1, 0, 0, time.UTC), false, "+15551230001", "+15559870002")
	s.CommitThen(r2, func(err error) { got = err })
	s.Flush()
	if got != nil {
		t.Fatal(got)
	}
	path := s.RecordPath(r2.Tenant, r2.ID, r2.Start)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r2.To = "+15550000000"
	s.CommitThen(r2, func(err error) { got = err })
	if !errors.Is(got, ErrCommitted) {
		t.Fatalf("second commit with spares: %v, want ErrCommitted", got)
	}
	if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
		t.Fatalf("committed record file changed by a refused commit: %v\n%s\n%s", err, before, after)
	}
	committedOnce(t, s, r2)
}

// TestCommitThenDiskFull: a step that fails on the committer (the index
// line, the marker's removal) or before it (the record file) keeps the
// record pending, done reports success as Commit does, and the retry
// writes it exactly once.
func TestCommitThenDiskFull(t *testing.T) {
	for _, step := range []string{"record", "index", "unmark"} {
		t.Run(step, func(t *testing.T) {
			s := newTestStore(t, nil, nil)
			start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
			r := call("acme", start, true, "+15551230001", "+15559870002")
			if err := s.Answered(r); err != nil {
				t.Fatal(err)
			}
			full := failSteps(s, step)
			var got error
			called := false
			s.CommitThen(r, func(err error) { got, called = err, true })
			s.Flush()
			if !called || got != nil {
				t.Fatalf("done called %t with %v, want nil", called, got)
			}
			if b := s.Backlog(); b.Pending != 1 {
				t.Fatalf("backlog %+v, want 1 pending", b)
			}
			full.on.Store(false)
			if left := s.RetryPending(); left != 0 {
				t.Fatalf("%d still pending", left)
			}
			committedOnce(t, s, r)
		})
	}
}

// TestCommitThenWritesIntoSpares: after a commit, the committer stocks
// spare files in a stock directory of the tenant's in-flight directory,
// and the next record file is one of them renamed into its day (no inode
// allocated on the call's goroutine), with the record's bytes.
func TestCommitThenWritesIntoSpares(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	s.CommitThen(call("acme", start, false, "+15551230001", "+15559870002"), func(err error) {
		if err != nil {
			t.Error(err)
		}
	})
	s.Flush()
	inodes := map[uint64]bool{}
	stocks, err := filepath.Glob(filepath.Join(s.inflightDir("acme"), stockDir+"-*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stocks {
		inodes[inodeOf(p)] = true
	}
	if len(inodes) < 8 {
		t.Fatalf("%d spares stocked, want at least 8", len(inodes))
	}
	r := call("acme", start.Add(time.Minute), true, "+15551230001", "+15559870002")
	s.CommitThen(r, func(err error) {
		if err != nil {
			t.Error(err)
		}
	})
	s.Flush()
	fi, err := os.Stat(s.RecordPath(r.Tenant, r.ID, r.Start))
	if err != nil {
		t.Fatal(err)
	}
	if !inodes[fi.Sys().(*syscall.Stat_t).Ino] {
		t.Fatal("record file is not one of the spares")
	}
	committedOnce(t, s, r)
}
