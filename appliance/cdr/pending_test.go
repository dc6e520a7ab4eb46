package cdr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

// diskFull makes the named write steps of s fail with ENOSPC while it is
// set.
type diskFull struct {
	on    atomic.Bool
	steps map[string]bool // nil: every step
	hits  atomic.Int64
}

func failSteps(s *Store, steps ...string) *diskFull {
	d := &diskFull{}
	if len(steps) > 0 {
		d.steps = map[string]bool{}
		for _, st := range steps {
			d.steps[st] = true
		}
	}
	d.on.Store(true)
	s.fault = func(step, path string) error {
		if !d.on.Load() || (d.steps != nil && !d.steps[step]) {
			return nil
		}
		d.hits.Add(1)
		return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	return d
}

// committedOnce checks that r has exactly one record file and one index
// line, and no marker.
func committedOnce(t *testing.T, s *Store, r *Record) {
	t.Helper()
	day := s.dayDir(r.Tenant, r.Start)
	lines := 0
	for _, e := range readLines(t, filepath.Join(day, IndexFile)) {
		if e.ID == r.ID {
			lines++
		}
	}
	if lines != 1 {
		t.Fatalf("%s has %d index lines, want 1", r.ID, lines)
	}
	ents, _ := os.ReadDir(day)
	files := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), string(r.ID)) {
			files++
		}
	}
	if files != 1 {
		t.Fatalf("%s has %d files in its day directory, want 1", r.ID, files)
	}
	if _, err := os.Stat(s.MarkerPath(r.Tenant, r.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker of %s still there: %v", r.ID, err)
	}
	got, err := s.Get(context.Background(), r.Tenant, r.ID)
	if err != nil || got.Cause != r.Cause || !got.End.Equal(msUTC(r.End)) {
		t.Fatalf("get %s: %v %+v", r.ID, err, got)
	}
}

// TestCommitFailureKeptAndRetried: whichever step of a commit fails, the
// record is kept, reported, retried while the failure lasts, and once the
// disk has room written exactly once.
func TestCommitFailureKeptAndRetried(t *testing.T) {
	for _, step := range []string{"record", "index", "unmark"} {
		t.Run(step, func(t *testing.T) {
			s := newTestStore(t, nil, nil)
			r := call("acme", time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC), true, "+15551230001", "+15559870002")
			if err := s.Answered(r); err != nil {
				t.Fatal(err)
			}
			full := failSteps(s, step)
			if err := s.Commit(r); err != nil {
				t.Fatalf("commit on a full disk: %v", err)
			}
			b := s.Backlog()
			if b.Pending != 1 || !strings.Contains(b.Problem(), "call records: 1 pending: no space left on device") {
				t.Fatalf("backlog %+v: %q", b, b.Problem())
			}
			for range 3 {
				if left := s.RetryPending(); left != 1 {
					t.Fatalf("retry on a full disk: %d left", left)
				}
			}
			if err := s.Commit(r); !errors.Is(err, ErrCommitted) {
				t.Fatalf("second commit of a pending record: %v", err)
			}
			if st := s.Stats(); st.Commits != 0 || st.Retried != 0 || st.Pending != 1 {
				t.Fatalf("stats on a full disk %+v", st)
			}
			full.on.Store(false)
			if left := s.RetryPending(); left != 0 {
				t.Fatalf("retry after freeing: %d left", left)
			}
			if st := s.Stats(); st.Commits != 0 || st.Retried != 1 || st.Pending != 0 {
				t.Fatalf("stats after the retry %+v", st)
			}
			r2 := call("acme", time.Date(2026, 11, 21, 15, 1, 0, 0, time.UTC), false, "+15551230001", "+15559870002")
			if err := s.Commit(r2); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			var n uint64
			for _, c := range st.Commit.Counts {
				n += c
			}
			if st.Commits != 1 || n != 1 || st.Commit.Sum <= 0 {
				t.Fatalf("stats after a first-attempt commit %+v", st)
			}
			if b := s.Backlog(); b.Pending != 0 || b.Problem() != "" {
				t.Fatalf("backlog after freeing: %+v", b)
			}
			committedOnce(t, s, r)
			if s.RetryPending() != 0 {
				t.Fatal("retry of an empty backlog")
			}
			committedOnce(t, s, r)
		})
	}
}

// TestRetryFindsRecordRenamed: a failure after the rename (the directory
// sync) leaves the record file in place; the retry adds the index line and
// does not refuse the record as committed already.
func TestRetryFindsRecordRenamed(t *testing.T) {
	s := newTestStore(t, nil, nil)
	r := call("acme", time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC), false, "+15551230001", "+15559870002")
	full := failSteps(s, "record")
	if err := s.Commit(r); err != nil {
		t.Fatal(err)
	}
	n := r.normalize()
	if err := os.MkdirAll(s.dayDir("acme", r.Start), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.RecordPath("acme", r.ID, r.Start), append(mustJSON(t, &n), '\n'), 0o640); err != nil {
		t.Fatal(err)
	}
	full.on.Store(false)
	if left := s.RetryPending(); left != 0 {
		t.Fatalf("%d left", left)
	}
	committedOnce(t, s, r)
}

// TestMarkerFailureKeptAndRetried: a marker that cannot be written at
// answer is kept and written later; a commit that comes first replaces it.
func TestMarkerFailureKeptAndRetried(t *testing.T) {
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	t.Run("marker written later", func(t *testing.T) {
		s := newTestStore(t, nil, nil)
		r := call("acme", start, true, "1", "2")
		full := failSteps(s)
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.MarkerPath("acme", r.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("marker written on a full disk: %v", err)
		}
		if s.Backlog().Pending != 1 {
			t.Fatalf("backlog %+v", s.Backlog())
		}
		full.on.Store(false)
		if s.RetryPending() != 0 {
			t.Fatal("marker still pending")
		}
		if got, err := readRecord(s.MarkerPath("acme", r.ID)); err != nil || got.ID != r.ID {
			t.Fatalf("marker after retry: %v", err)
		}
		commit(t, s, r)
		committedOnce(t, s, r)
	})
	t.Run("commit while still full", func(t *testing.T) {
		s := newTestStore(t, nil, nil)
		r := call("acme", start, true, "1", "2")
		full := failSteps(s)
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(r); err != nil {
			t.Fatal(err)
		}
		if s.Backlog().Pending != 1 {
			t.Fatalf("backlog %+v", s.Backlog())
		}
		full.on.Store(false)
		if s.RetryPending() != 0 {
			t.Fatal("still pending")
		}
		committedOnce(t, s, r)
	})
	t.Run("commit after freeing", func(t *testing.T) {
		s := newTestStore(t, nil, nil)
		r := call("acme", start, true, "1", "2")
		full := failSteps(s)
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		full.on.Store(false)
		commit(t, s, r)
		if b := s.Backlog(); b.Pending != 0 {
			t.Fatalf("pending marker of a committed call kept: %+v", b)
		}
		committedOnce(t, s, r)
	})
}

// TestBacklogBoundAndCrash: past MaxPending a record is refused from memory
// but its marker carries it, with the call's end as its time; after a
// crash every answered call's record is recovered from its marker, ending
// when the call ended.
func TestBacklogBoundAndCrash(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, nil, func(o *Options) { o.DataDir = dir; o.MaxPending = 2 })
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	var recs []*Record
	for i := range 3 {
		r := call("acme", start.Add(time.Duration(i)*time.Second), true, "1", fmt.Sprint(i))
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	unanswered := call("acme", start, false, "1", "9")
	full := failSteps(s)
	for i, r := range recs {
		err := s.Commit(r)
		if (i < 2) != (err == nil) || (i == 2 && !errors.Is(err, ErrBacklogFull)) {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if err := s.Commit(unanswered); !errors.Is(err, ErrBacklogFull) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("unanswered call past the bound: %v", err)
	}
	b := s.Backlog()
	if b.Pending != 2 || b.OverBound != 2 || !strings.Contains(b.Problem(), "2 left to their in-flight markers or lost") {
		t.Fatalf("backlog %+v %q", b, b.Problem())
	}
	for _, r := range recs {
		fi, err := os.Stat(s.MarkerPath("acme", r.ID))
		if err != nil || !fi.ModTime().Equal(r.End) {
			t.Fatalf("marker of %s: %v, mtime %v, want the call's end %v", r.ID, err, fi.ModTime(), r.End)
		}
	}
	full.on.Store(false)

	// The process dies here; the next start recovers the answered calls.
	s2 := newTestStore(t, nil, func(o *Options) { o.DataDir = dir })
	acts, err := s2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	promoted := 0
	for _, a := range acts {
		if a.Kind == ActPromoted {
			promoted++
		}
	}
	if promoted != 3 {
		t.Fatalf("promoted %d, want 3: %v", promoted, acts)
	}
	for _, r := range recs {
		got, err := s2.Get(context.Background(), "acme", r.ID)
		if err != nil || !got.Incomplete || !got.End.Equal(r.End) || got.DurationMS != 90_000 {
			t.Fatalf("recovered %s: %v %+v", r.ID, err, got)
		}
	}
}

// TestRefreshMarkers: the marker of an answered call in progress gets the
// current time as its modification time, and a record recovered after a
// crash ends at the last refresh; an ended call's marker is left alone.
func TestRefreshMarkers(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	now.Store(start.UnixNano())
	s := newTestStore(t, nil, func(o *Options) {
		o.DataDir = dir
		o.Now = func() time.Time { return time.Unix(0, now.Load()).UTC() }
	})
	live := NewRecord("acme", calls.DirectionInbound, start)
	live.SetAnswer(start.Add(5*time.Second), "100")
	ended := call("acme", start, true, "1", "2")
	for _, r := range []*Record{live, ended} {
		if err := s.Answered(r); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, s, ended)
	if err := s.Answered(ended); err != nil { // a late rewrite must not leave a refreshed marker behind
		t.Fatal(err)
	}
	if err := os.Remove(s.MarkerPath("acme", ended.ID)); err != nil {
		t.Fatal(err)
	}
	refreshed := start.Add(7 * time.Minute)
	now.Store(refreshed.UnixNano())
	s.RefreshMarkers()
	fi, err := os.Stat(s.MarkerPath("acme", live.ID))
	if err != nil || !fi.ModTime().Equal(refreshed) {
		t.Fatalf("marker mtime %v (%v), want %v", fi.ModTime(), err, refreshed)
	}
	if _, err := os.Stat(s.MarkerPath("acme", ended.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refresh recreated the marker of an ended call: %v", err)
	}

	s2 := newTestStore(t, nil, func(o *Options) { o.DataDir = dir })
	if _, err := s2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get(context.Background(), "acme", live.ID)
	if err != nil || !got.End.Equal(refreshed) || got.DurationMS != (7*time.Minute).Milliseconds() || got.Cause != calls.CauseIncomplete {
		t.Fatalf("recovered: %v %+v", err, got)
	}
}

// TestRecoverOnFullDisk: a start with a full disk does not fail; the
// promoted record is pending and written once there is room.
func TestRecoverOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, nil, func(o *Options) { o.DataDir = dir })
	r := call("acme", time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC), true, "1", "2")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, nil, func(o *Options) { o.DataDir = dir })
	full := failSteps(s2)
	acts, err := s2.Recover(context.Background())
	if err != nil {
		t.Fatalf("recover on a full disk: %v", err)
	}
	if len(acts) != 1 || !strings.Contains(acts[0].Detail, "pending") || s2.Backlog().Pending != 1 {
		t.Fatalf("actions %v, backlog %+v", acts, s2.Backlog())
	}
	if _, err := os.Stat(s2.MarkerPath("acme", r.ID)); err != nil {
		t.Fatalf("marker gone before its record is written: %v", err)
	}
	full.on.Store(false)
	if s2.RetryPending() != 0 {
		t.Fatal("still pending")
	}
	got, err := s2.Get(context.Background(), "acme", r.ID)
	if err != nil || !got.Incomplete {
		t.Fatalf("%v %+v", err, got)
	}
}

// countHandler counts log records by level and message.
type countHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Level.String()+" "+r.Message]++
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key]
}

// TestRunRetriesAndLogsOncePerInterval: many failed commits log one error
// per ProblemLogInterval, not one per call; Run writes the records once
// the disk has room, and says so.
func TestRunRetriesAndLogsOncePerInterval(t *testing.T) {
	h := &countHandler{n: map[string]int{}}
	var now atomic.Int64
	base := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	now.Store(base.UnixNano())
	s, err := New(Options{
		DataDir:  t.TempDir(),
		Location: func(string) *time.Location { return time.UTC },
		Now:      func() time.Time { return time.Unix(0, now.Load()).UTC() },
		RetryMin: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
	}, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	const calls = 50
	full := failSteps(s)
	var recs []*Record
	for i := range calls {
		r := call("acme", base.Add(time.Duration(i)*time.Second), i%2 == 0, "1", fmt.Sprint(i))
		if err := s.Commit(r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	const msg = "ERROR call records cannot be written; kept in memory and retried"
	if n := h.count(msg); n != 1 {
		t.Fatalf("%d error lines for %d failed calls, want 1", n, calls)
	}
	now.Add(int64(ProblemLogInterval))
	if err := s.Commit(call("acme", base.Add(time.Hour), false, "1", "x")); err != nil {
		t.Fatal(err)
	}
	if n := h.count(msg); n != 2 {
		t.Fatalf("%d error lines a minute later, want 2", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Several rounds fail while the disk is full; the clock moves so that
	// the backoff elapses.
	for deadline := time.Now().Add(5 * time.Second); full.hits.Load() < calls+1+3*maxFailuresPerRound; {
		if time.Now().After(deadline) {
			t.Fatalf("no retries: %d failed writes", full.hits.Load())
		}
		now.Add(int64(time.Second))
		time.Sleep(5 * time.Millisecond)
	}
	full.on.Store(false)
	for deadline := time.Now().Add(5 * time.Second); s.Backlog().Pending != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("backlog not written: %+v", s.Backlog())
		}
		now.Add(int64(time.Second))
		time.Sleep(5 * time.Millisecond)
	}
	for _, r := range recs {
		committedOnce(t, s, r)
	}
	if n := h.count("INFO call records written after a write failure"); n != 1 {
		t.Fatalf("%d recovery lines, want 1", n)
	}
}

// TestBacklogConcurrentFlapping: calls are answered and committed from
// several goroutines while the disk fills and frees at random steps and
// retries and marker refreshes run alongside; once the disk has room for
// good, every record is written exactly once and no marker is left. Run
// with -race.
func TestBacklogConcurrentFlapping(t *testing.T) {
	s := newTestStore(t, nil, nil)
	var flips atomic.Int64
	s.fault = func(step, path string) error {
		// Fail about a third of the steps, in bursts, while flips is odd.
		if flips.Load()%2 == 1 && len(path)%3 == 0 {
			return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
		}
		return nil
	}
	const workers, perWorker = 4, 60
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	stop := make(chan struct{})
	var maxPending atomic.Int64
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			flips.Add(1)
			maxPending.Store(max(maxPending.Load(), int64(s.Backlog().Pending)))
			s.RetryPending()
			s.RefreshMarkers()
		}
	}()
	recs := make([][]*Record, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				r := call("acme", start.Add(time.Duration(w*perWorker+i)*time.Second), i%3 != 0, "1", fmt.Sprint(w, i))
				if r.Answered() {
					if err := s.Answered(r); err != nil {
						t.Error(err)
					}
				}
				if err := s.Commit(r); err != nil {
					t.Error(err)
				}
				recs[w] = append(recs[w], r)
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	if flips.Load()%2 == 1 {
		flips.Add(1)
	}
	if left := s.RetryPending(); left != 0 {
		t.Fatalf("%d pending after the disk has room", left)
	}
	if maxPending.Load() == 0 {
		t.Fatal("no write ever failed: the test proves nothing")
	}
	t.Logf("up to %d records pending at once", maxPending.Load())
	for _, rs := range recs {
		for _, r := range rs {
			committedOnce(t, s, r)
		}
	}
	if n := markersIn(t, s.inflightDir("acme")); n != 0 {
		t.Fatalf("%d markers left", n)
	}
	if b := s.Backlog(); b.Pending != 0 || b.Problem() != "" {
		t.Fatalf("backlog %+v", b)
	}
}
