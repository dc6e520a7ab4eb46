package cdr

import (
	"sync/atomic"
	"time"
)

// CommitBounds are the upper bounds of the commit time buckets of Stats.
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
	// CommitCounts[i] counts first-attempt commits that took at most
	// CommitBounds[i] (the last bucket has no bound): write, fsync, rename,
	// directory fsync and index line.
	CommitCounts [len(CommitBounds) + 1]uint64
	CommitTime   time.Duration // sum
	Pending      int           // records waiting for the disk
}

type commitStats struct {
	commits, retried atomic.Uint64
	buckets          [len(CommitBounds) + 1]atomic.Uint64
	sum              atomic.Int64
}

func (c *commitStats) observe(d time.Duration) {
	i := 0
	for i < len(CommitBounds) && d > CommitBounds[i] {
		i++
	}
	c.buckets[i].Add(1)
	c.sum.Add(int64(d))
	c.commits.Add(1)
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	st := Stats{Commits: s.stats.commits.Load(), Retried: s.stats.retried.Load(),
		CommitTime: time.Duration(s.stats.sum.Load()), Pending: s.Backlog().Pending}
	for i := range st.CommitCounts {
		st.CommitCounts[i] = s.stats.buckets[i].Load()
	}
	return st
}
