package cdr

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the write-failure backlog and the marker refresh.
const (
	// DefaultMaxPending bounds the records kept in memory while they cannot
	// be written (a full disk). Past it an answered call's record falls back
	// to its in-flight marker on disk, recovered at the next start.
	DefaultMaxPending = 10_000
	// DefaultRetryMin is the first delay before a pending record is written
	// again; each failed round doubles it up to DefaultRetryMax.
	DefaultRetryMin = 5 * time.Second
	// DefaultRetryMax caps the retry delay.
	DefaultRetryMax = time.Minute
	// DefaultMarkerRefresh is how often the modification time of every
	// in-flight marker is set to the current time, so that a record
	// recovered after a crash ends at most this long before the truth.
	DefaultMarkerRefresh = 30 * time.Second
	// ProblemLogInterval is how often a persistent write failure is logged
	// (with the count of pending records), instead of once a call.
	ProblemLogInterval = time.Minute
	// maxFailuresPerRound: a retry round gives up after this many failed
	// writes in a row; the disk is still full.
	maxFailuresPerRound = 8
)

// ErrBacklogFull: a record could not be written and the pending backlog is
// at Options.MaxPending, so it is not kept in memory. An answered call's
// record is still recovered from its in-flight marker at the next start
// (its end set to the call's end); an unanswered call's record is lost.
var ErrBacklogFull = errors.New("call record backlog full")

// stage is how far a pending record's write got.
type stage uint8

const (
	stageMarker  stage = iota // the in-flight marker of an answered call is to be written
	stageRecord               // the record file is to be written
	stageIndex                // the record file is written; its index line is to be appended
	stageCleanup              // the index line is written; the marker is to be removed
)

type recKey struct {
	tenant string
	id     ID
}

// pendingRec is a record (or marker) that could not be written yet.
type pendingRec struct {
	rec   Record // normalized
	stage stage
}

// backlog holds the records that failed to be written, the in-flight
// markers to refresh, and what /v1/status and the log say about them.
type backlog struct {
	mu        sync.Mutex
	recs      map[recKey]*pendingRec
	live      [liveShards]liveShard // marker path of every answered call in progress
	lastErr   error                 // the last write failure
	since     time.Time             // first failure of the current episode
	over      int                   // records not kept for the bound in this episode
	written   int                   // pending records written in this episode
	lastLog   time.Time             // of the error line
	lastClear time.Time             // of the all-written line
	fails     int                   // consecutive failed retry rounds
	next      time.Time             // earliest next retry round

	n    atomic.Int64  // len(recs), read without the lock on the commit path
	kick chan struct{} // a write succeeded while records were pending: retry now

	seed    maphash.Seed
	stripes [64]sync.Mutex // per-record order between Answered, Commit and retries
}

func newBacklog() *backlog {
	b := &backlog{recs: map[recKey]*pendingRec{}, kick: make(chan struct{}, 1), seed: maphash.MakeSeed()}
	for i := range b.live {
		b.live[i].m = map[recKey]string{}
	}
	return b
}

// liveShards splits the set of calls in progress, which every answer and
// every end changes: under one lock (shared with the backlog) the calls
// answering and ending at once queued for it.
const liveShards = 16

type liveShard struct {
	mu sync.Mutex
	m  map[recKey]string
}

func (b *backlog) liveShard(id ID) *liveShard {
	return &b.live[maphash.String(b.seed, string(id))%liveShards]
}

// stripe returns the lock that orders every write of one record.
func (b *backlog) stripe(id ID) *sync.Mutex {
	return &b.stripes[maphash.String(b.seed, string(id))%uint64(len(b.stripes))]
}

// order serialises a write of record id with the retries of its pending
// version and returns the unlock. With nothing pending it takes no lock: a
// retry only touches a record that is pending, and a record becomes pending
// only through an earlier Answered or Commit of the same call, which the
// caller makes in order (the call manager's events of one call are).
func (b *backlog) order(id ID) func() {
	if b.n.Load() == 0 {
		return func() {}
	}
	mu := b.stripe(id)
	mu.Lock()
	return mu.Unlock
}

func (b *backlog) get(k recKey) *pendingRec {
	if b.n.Load() == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.recs[k]
}

// Backlog describes records that could not be written yet.
type Backlog struct {
	// Pending is how many records (or in-flight markers) wait in memory to
	// be written.
	Pending int
	// OverBound counts records not kept in memory because the backlog was
	// full, since the last time it was empty.
	OverBound int
	// Err is the last write failure; nil when Pending is zero.
	Err error
	// Since is when the first of the pending writes failed.
	Since time.Time
}

// Problem is a one-line description of the backlog for a status report,
// or "" when every record is written.
func (b Backlog) Problem() string {
	if b.Pending == 0 && b.OverBound == 0 {
		return ""
	}
	s := fmt.Sprintf("call records: %d pending", b.Pending)
	if b.OverBound > 0 {
		s += fmt.Sprintf(", %d left to their in-flight markers or lost", b.OverBound)
	}
	if b.Err != nil {
		s += ": " + rootCause(b.Err).Error()
	}
	return s
}

// rootCause is the innermost error err wraps ("no space left on device").
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// Backlog reports the records waiting to be written. A non-empty backlog
// means the data directory refuses writes (usually: it is full).
func (s *Store) Backlog() Backlog {
	b := s.bl
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.recs) == 0 && b.over == 0 {
		return Backlog{}
	}
	return Backlog{Pending: len(b.recs), OverBound: b.over, Err: b.lastErr, Since: b.since}
}

// keep puts a record whose write failed with cause into the backlog, to be
// retried from stage st. It returns nil when the record is kept, and an
// error wrapping ErrBacklogFull when the backlog is full.
func (s *Store) keep(n *Record, st stage, cause error) error {
	b := s.bl
	k := recKey{n.Tenant, n.ID}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := s.opts.Now()
	if len(b.recs) == 0 && b.over == 0 {
		// A new episode; lastLog carries over, so a disk that fills and
		// frees over and over is still logged once per interval.
		b.since, b.written, b.fails = now, 0, 0
		b.next = now.Add(s.opts.RetryMin)
	}
	b.lastErr = cause
	if p := b.recs[k]; p != nil {
		p.rec, p.stage = *n, st
		s.reportLocked(now)
		return nil
	}
	if len(b.recs) >= s.opts.MaxPending {
		b.over++
		s.reportLocked(now)
		if st == stageMarker {
			return fmt.Errorf("%w: in-flight marker %s/%s not written: %w", ErrBacklogFull, n.Tenant, n.ID, cause)
		}
		if st >= stageIndex || s.pinMarker(n) {
			// The record file is written (recovery adds its index line), or
			// the marker carries the call to the next start with its end.
			return fmt.Errorf("%w: %s/%s left to recovery: %w", ErrBacklogFull, n.Tenant, n.ID, cause)
		}
		return fmt.Errorf("%w: %s/%s lost: %w", ErrBacklogFull, n.Tenant, n.ID, cause)
	}
	b.recs[k] = &pendingRec{rec: *n, stage: st}
	b.n.Store(int64(len(b.recs)))
	s.reportLocked(now)
	return nil
}

// pinMarker sets the modification time of a finished call's in-flight
// marker to its end, which recovery takes as the end of the promoted
// record. It reports whether the marker exists. Setting times needs no
// free space.
func (s *Store) pinMarker(n *Record) bool {
	if n.Answer == nil {
		return false
	}
	return os.Chtimes(s.MarkerPath(n.Tenant, n.ID), n.End, n.End) == nil
}

// reportLocked logs the backlog as an error at most once every
// ProblemLogInterval. b.mu is held.
func (s *Store) reportLocked(now time.Time) {
	b := s.bl
	if !b.lastLog.IsZero() && now.Sub(b.lastLog) < ProblemLogInterval {
		return
	}
	b.lastLog = now
	s.log.Error("call records cannot be written; kept in memory and retried",
		"pending", len(b.recs), "over_bound", b.over, "since", b.since, "limit", limitHit(b.lastErr), "err", b.lastErr)
}

// limitHit names the limit a write failure hit, for the log: the disk's
// space or inodes, or the process's descriptors; "" for another failure.
func limitHit(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "disk full: no space or no free inode on the data directory's file system"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota of the pbx user"
	case errors.Is(err, syscall.EMFILE):
		return "the process's open file limit (RLIMIT_NOFILE, systemd LimitNOFILE)"
	case errors.Is(err, syscall.ENFILE):
		return "the system's open file limit (fs.file-max)"
	}
	return ""
}

// forget drops a record from the backlog (it was written another way).
func (s *Store) forget(k recKey) {
	b := s.bl
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.recs[k]; ok {
		delete(b.recs, k)
		b.n.Store(int64(len(b.recs)))
		b.written++
		s.clearedLocked()
	}
}

// clearedLocked ends an episode once the backlog is empty. b.mu is held.
func (s *Store) clearedLocked() {
	b := s.bl
	if len(b.recs) > 0 {
		return
	}
	if now := s.opts.Now(); (b.written > 0 || b.over > 0) && now.Sub(b.lastClear) >= ProblemLogInterval {
		b.lastClear = now
		s.log.Info("call records written after a write failure", "written", b.written, "over_bound", b.over,
			"since", b.since)
	}
	b.over, b.written, b.fails, b.lastErr = 0, 0, 0, nil
}

// wrote tells the retry loop that a write succeeded; if records are
// pending, the disk may have room again.
func (s *Store) wrote() {
	if s.bl.n.Load() == 0 {
		return
	}
	select {
	case s.bl.kick <- struct{}{}:
	default:
	}
}

// retryDue runs a retry round when one is due (or forced, after a write
// succeeded) and schedules the next with exponential backoff.
func (s *Store) retryDue(force bool) {
	b := s.bl
	if b.n.Load() == 0 {
		return
	}
	now := s.opts.Now()
	b.mu.Lock()
	due := force || !now.Before(b.next)
	b.mu.Unlock()
	if !due {
		return
	}
	left := s.RetryPending()
	b.mu.Lock()
	defer b.mu.Unlock()
	if left == 0 {
		b.fails = 0
		return
	}
	b.fails++
	d := s.opts.RetryMin << min(b.fails, 16)
	if d > s.opts.RetryMax || d <= 0 {
		d = s.opts.RetryMax
	}
	b.next = now.Add(d)
	s.reportLocked(now)
}

// RetryPending tries once to write every pending record and returns how
// many are still pending. Run calls it on its schedule; it is exported for
// tests and for a final attempt at shutdown.
func (s *Store) RetryPending() int {
	b := s.bl
	b.mu.Lock()
	keys := make([]recKey, 0, len(b.recs))
	for k := range b.recs { // map order: a record that always fails does not starve the others
		keys = append(keys, k)
	}
	b.mu.Unlock()
	failed := 0
	for _, k := range keys {
		if failed >= maxFailuresPerRound {
			break
		}
		if err := s.retryOne(k); err != nil {
			failed++
		} else {
			failed = 0
		}
	}
	return int(b.n.Load())
}

// retryOne carries one pending record's write on from where it stopped.
func (s *Store) retryOne(k recKey) error {
	b := s.bl
	mu := b.stripe(k.id)
	mu.Lock()
	defer mu.Unlock()
	b.mu.Lock()
	p := b.recs[k]
	var rec Record
	var st stage
	if p != nil {
		rec, st = p.rec, p.stage
	}
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	var err error
	if st == stageMarker {
		err = s.writeMarker(&rec, s.MarkerPath(rec.Tenant, rec.ID))
	} else {
		err = s.commitFrom(&rec, &st, true)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil && !errors.Is(err, ErrCommitted) {
		p.stage = st
		b.lastErr = err
		return err
	}
	if err != nil {
		s.log.Error("pending call record dropped", "tenant", k.tenant, "id", k.id, "err", err)
	} else if st != stageMarker {
		s.stats.retried.Add(1)
	}
	delete(b.recs, k)
	b.n.Store(int64(len(b.recs)))
	b.written++
	s.clearedLocked()
	return nil
}

// track and untrack keep the set of in-flight markers Run refreshes;
// path is k's (MarkerPath).
func (s *Store) track(k recKey, path string) {
	sh := s.bl.liveShard(k.id)
	sh.mu.Lock()
	sh.m[k] = path
	sh.mu.Unlock()
}

func (s *Store) untrack(k recKey) {
	sh := s.bl.liveShard(k.id)
	sh.mu.Lock()
	delete(sh.m, k)
	sh.mu.Unlock()
}

// RefreshMarkers sets the modification time of the in-flight marker of
// every answered call in progress to now, so that a record recovered after
// a crash ends within Options.MarkerRefresh of the truth. The file system
// is synced behind them with the markers' next batched sync. Run calls it
// every Options.MarkerRefresh.
func (s *Store) RefreshMarkers() {
	var paths []string
	for i := range s.bl.live {
		sh := &s.bl.live[i]
		sh.mu.Lock()
		for _, p := range sh.m {
			paths = append(paths, p)
		}
		sh.mu.Unlock()
	}
	if len(paths) == 0 {
		return
	}
	now := s.opts.Now()
	failed := 0
	var last error
	for _, p := range paths {
		// A marker gone meanwhile (committed) or not yet written (pending)
		// is no failure.
		if err := os.Chtimes(p, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed++
			last = err
		}
	}
	s.markersDirty.Store(true)
	if failed > 0 {
		s.log.Warn("refresh in-flight call markers", "failed", failed, "of", len(paths), "err", last)
	}
}
