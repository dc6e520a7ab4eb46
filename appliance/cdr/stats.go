package cdr

import (
	"sync/atomic"
	"time"
)

// CommitBounds are the upper bounds of the time buckets of Stats (commits
// and the writes a call waits for).
var CommitBounds = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

// Stats are the writer's counters since the store opened.
type Stats struct {
	// Commits counts records committed on their first attempt (a record
	// written by a retry is in Retried).
	Commits uint64
	Retried uint64
	// Commit is the time of the first-attempt commits: write, fsync,
	// rename, index line and marker removal (for CommitThen, until done).
	Commit TimeCounts
	// Marker is the time Answered took (the in-flight marker, written
	// before the caller hears the answer); Record the time CommitThen
	// took (the record file, written on the goroutine that ends the call).
	// Both are what a call waits for the disk.
	Marker, Record TimeCounts
	Pending        int // records waiting for the disk
}

// TimeCounts is a histogram of durations: Counts[i] counts those that
// took at most CommitBounds[i] (the last bucket has no bound); Sum is
// their total.
type TimeCounts struct {
	Counts [len(CommitBounds) + 1]uint64
	Sum    time.Duration
}

// timeHist is the live form of TimeCounts.
type timeHist struct {
	buckets [len(CommitBounds) + 1]atomic.Uint64
	sum     atomic.Int64
}

func (h *timeHist) observe(d time.Duration) {
	i := 0
	for i < len(CommitBounds) && d > CommitBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(int64(d))
}

func (h *timeHist) load() TimeCounts {
	t := TimeCounts{Sum: time.Duration(h.sum.Load())}
	for i := range t.Counts {
		t.Counts[i] = h.buckets[i].Load()
	}
	return t
}

type commitStats struct {
	commits, retried atomic.Uint64
	commit           timeHist
	marker, record   timeHist
}

func (c *commitStats) observe(d time.Duration) {
	c.commit.observe(d)
	c.commits.Add(1)
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.stats.commits.Load(), Retried: s.stats.retried.Load(),
		Commit: s.stats.commit.load(), Marker: s.stats.marker.load(), Record: s.stats.record.load(),
		Pending: s.Backlog().Pending}
}
