package cdr

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// committer finishes the commits CommitThen hands over: the wait for the
// commit journal's fdatasync, the index lines and the marker removals,
// in batches, on one goroutine that runs while there is work.
type committer struct {
	mu      sync.Mutex
	idle    sync.Cond // broadcast when running goes false
	queue   []*asyncCommit
	spare   []*asyncCommit // the previous batch's slice, reused
	running bool
	// retiredLeft: the last batch retired markers (spares.retire) or
	// left some aging, which a later round removes.
	retiredLeft bool
	last        time.Time // when the last batch was taken
	lines       []byte    // the index lines of a day file in a batch, reused by the committer
}

// commitPace is the least time between two batches: the commits handed
// over meanwhile wait for the next, so that at high call rates one
// fdatasync covers many records. On a virtual machine an fdatasync costs
// 40-80 us of CPU (a data write and a cache flush, each a notification
// of the virtual device), which one a commit made a quarter of the call
// record's cost at 500 calls/s, and one every 10 ms still 10-16 us a
// call (BenchmarkAnsweredCommit, syncs/call); at 500 calls/s a batch
// every 25 ms held about 12 records, every 50 ms 25 (half the journal
// writes, fdatasyncs, index appends and committer wake-ups a call:
// BenchmarkAnsweredCommitPaced, syncs/call 0.079 to 0.040). The
// specification sets no time for the call.ended webhook nor for a
// record's listing; 50 ms is well below what a person notices. A commit
// after a quiet spell goes at once; done (the call.ended webhook) comes
// at most this much later than the sync would have allowed.
const commitPace = 50 * time.Millisecond

// asyncCommit is a commit whose record file is written and whose journal
// entry is staged, waiting for the fdatasync that makes it durable.
type asyncCommit struct {
	n          Record // normalized
	dir, final string
	j          *journal // nil: the file is durable already
	seq        uint64
	start      time.Time
	done       func(error)
}

// CommitThen commits r as Commit does, but the wait for the disk leaves the
// caller: it returns once the record file is in place (a killed process
// loses nothing) and its commit journal entry staged (the committer's
// sync writes it), and calls done
// once the record is durable (a power cut no longer loses it), indexed
// and its marker removed, with the error Commit would have returned; what
// the record is durably may be announced from done. done runs on the
// store's committer goroutine, one record after another (it must not
// block), or before CommitThen returns for a record that fails at once
// (invalid, committed already) and while the backlog holds records (the
// commit is then made the synchronous way). So the goroutine that ends a
// call does not wait for an fdatasync shared with other commits. Flush
// waits for the handed-over commits.
func (s *Store) CommitThen(r *Record, done func(error)) {
	if err := r.validate(true); err != nil {
		done(err)
		return
	}
	if s.bl.n.Load() > 0 {
		// Retries run in the order Commit keeps with them.
		done(s.Commit(r))
		return
	}
	c := &asyncCommit{n: r.normalize(), done: done}
	n := &c.n
	s.untrack(recKey{n.Tenant, n.ID}) // the call has ended: its marker's time must stay put
	c.dir = s.dayDir(n.Tenant, n.Start)
	c.final = inDir(c.dir, n.ID, recordExt)
	c.start = time.Now()
	var err error
	// A record file in place already fails its rename (no lookup first).
	c.j, c.seq, err = s.writeFile(n, c.dir, c.final)
	s.stats.record.observe(time.Since(c.start))
	if errors.Is(err, ErrCommitted) {
		done(err)
		return
	} else if err != nil {
		s.pinMarker(n) // a crash before the retry recovers the right end
		done(s.keep(n, stageRecord, err))
		return
	}
	q := &s.commits
	q.mu.Lock()
	q.queue = append(q.queue, c)
	if !q.running {
		q.running = true
		go s.commitLoop()
	}
	q.mu.Unlock()
}

// Flush returns once every commit handed to CommitThen before it was
// called is finished (its done called).
func (s *Store) Flush() {
	q := &s.commits
	q.mu.Lock()
	for q.running {
		q.idle.Wait()
	}
	q.mu.Unlock()
}

// commitLoop finishes the queued commits, a batch at a time, until the
// queue is empty.
func (s *Store) commitLoop() {
	q := &s.commits
	var batch []*asyncCommit
	for {
		q.mu.Lock()
		if wait := time.Until(q.last.Add(commitPace)); wait > 0 {
			q.mu.Unlock()
			time.Sleep(wait)
			q.mu.Lock()
		}
		q.last = time.Now()
		clear(batch)
		q.spare = batch[:0]
		batch = q.queue
		q.queue = q.spare
		q.spare = nil
		if len(batch) == 0 && !q.retiredLeft {
			q.running = false
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		// The markers retired by the previous batch and not reused since
		// are removed; those of this batch wait for the next (a round
		// with an empty batch when no commit comes).
		left := s.spares.ageRetired()
		s.finishBatch(batch)
		q.mu.Lock()
		q.retiredLeft = left || len(batch) > 0
		q.mu.Unlock()
	}
}

// finishBatch waits for one fdatasync of the journal covering every
// commit of batch (the files of those whose journal failed are synced on
// their own), appends their index lines, one write per day file, and
// removes their markers. A step that fails keeps the record in the
// backlog from that step, as Commit does.
func (s *Store) finishBatch(batch []*asyncCommit) {
	var j *journal
	var top uint64
	for _, c := range batch {
		if c.j != nil {
			j, top = c.j, max(top, c.seq)
		}
	}
	var jerr error
	if j != nil {
		if jerr = j.sync(top); jerr != nil {
			s.log.Warn("commit journal failed; records synced on their own", "records", len(batch), "err", jerr)
		}
	}
	durable := make([]*asyncCommit, 0, len(batch))
	for _, c := range batch {
		if jerr != nil && c.j != nil {
			if err := s.syncRecordFile(&c.n, c.dir, c.final); err != nil {
				s.pinMarker(&c.n)
				c.done(s.keep(&c.n, stageRecord, err))
				continue
			}
		}
		durable = append(durable, c)
	}
	indexed := s.indexBatch(durable)
	for _, c := range indexed {
		marker := s.MarkerPath(c.n.Tenant, c.n.ID)
		err := s.step("unmark", marker)
		if err == nil {
			err = s.spares.retire(marker)
		}
		if err != nil {
			c.done(s.keep(&c.n, stageCleanup, fmt.Errorf("remove marker %s: %w", c.n.ID, err)))
			continue
		}
		s.stats.observe(time.Since(c.start))
		c.done(nil)
	}
	if len(indexed) > 0 {
		s.wrote()
	}
	s.restock(batch)
}

// restock refills the spares of the in-flight directories of the tenants
// of batch, which the next records are written into: four times the
// tenant's records in batch, at least 8.
func (s *Store) restock(batch []*asyncCommit) {
	counts := map[string]int{}
	for _, c := range batch {
		counts[c.n.Tenant]++
	}
	for tenant, n := range counts {
		dir := s.inflightDir(tenant)
		want := max(4*n, 8)
		if !s.spares.refill(dir, want) {
			// A tenant without answered calls yet has no directory.
			if ensureDir(dir) == nil {
				s.spares.refill(dir, want)
			}
		}
	}
}

// indexBatch appends the index lines of cs, grouped by day file in one
// write each, and returns the commits whose line is written; the others
// are kept in the backlog and done.
func (s *Store) indexBatch(cs []*asyncCommit) []*asyncCommit {
	out := make([]*asyncCommit, 0, len(cs))
	var dirs []string // in order of first appearance
	groups := map[string][]*asyncCommit{}
	for _, c := range cs {
		if err := s.step("index", c.dir); err != nil {
			c.done(s.keep(&c.n, stageIndex, fmt.Errorf("index record %s: %w", c.n.ID, err)))
			continue
		}
		if _, ok := groups[c.dir]; !ok {
			dirs = append(dirs, c.dir)
		}
		groups[c.dir] = append(groups[c.dir], c)
	}
	lines := s.commits.lines // indexBatch runs on the committer only
	defer func() {
		if cap(lines) <= maxStagedKept {
			s.commits.lines = lines[:0]
		}
	}()
	for _, dir := range dirs {
		group := groups[dir]
		lines = lines[:0]
		for _, c := range group {
			e := c.n.Entry()
			lines = e.AppendLine(lines)
		}
		if err := s.appendIndex(dir, lines); err != nil {
			for _, c := range group {
				c.done(s.keep(&c.n, stageIndex, fmt.Errorf("index record %s: %w", c.n.ID, err)))
			}
			continue
		}
		out = append(out, group...)
	}
	return out
}
