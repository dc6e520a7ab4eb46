package guard

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// evictScan is how many of a shard's least recently seen sources one
// eviction looks at before giving up on that shard.
const evictScan = 8

// failOpenLogEvery spaces the log lines that report admissions without
// tracking (and other rate-limited guard events).
const failOpenLogEvery = time.Minute

// lru is a shard's list of tracked sources, most recently seen first. It
// is intrusive (source.prev, source.next), so moving a source costs no
// allocation. The shard's lock guards it.
type lru struct{ head, tail *source }

func (l *lru) pushFront(s *source) {
	s.prev, s.next = nil, l.head
	if l.head != nil {
		l.head.prev = s
	}
	l.head = s
	if l.tail == nil {
		l.tail = s
	}
}

func (l *lru) remove(s *source) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.tail = s.prev
	}
	s.prev, s.next = nil, nil
}

// touch marks s as seen now.
func (l *lru) touch(s *source) {
	if l.head != s {
		l.remove(s)
		l.pushFront(s)
	}
}

// blameless: s carries no active ban, no failure inside the window and no
// offence still remembered, so forgetting it loses only its token bucket.
func (g *Guard) blameless(s *source, now time.Duration) bool {
	if s.until > now {
		return false
	}
	if k := len(s.failures); k > 0 && now-s.failures[k-1] < g.authWindow {
		return false
	}
	return s.offences == 0 || now-s.until >= g.banMax
}

// track starts remembering a with a full bucket. When the tracker is full
// it first evicts the least recently seen blameless source of a's shard,
// then of any other shard, and reuses its memory; when every tracked
// source it looks at carries a failure or a ban it returns nil (fail
// open). sh is a's shard, locked; it stays locked on return, though it may
// have been unlocked meanwhile.
//
// The tracked count includes places reserved and not yet filled, so it
// never falls below the sources in the shards and no two goroutines can
// fill one freed place.
func (g *Guard) track(sh *shard, a netip.Addr, now time.Duration) *source {
	var s *source
	if g.tracked.Add(1) > g.maxTracked {
		// Over by this reservation: an eviction gives a place back.
		if s = g.evictFrom(sh, now); s == nil {
			sh.mu.Unlock()
			s = g.evictElsewhere(sh, now)
			sh.mu.Lock()
			if t := sh.m[a]; t != nil {
				// Tracked by another goroutine meanwhile.
				g.tracked.Add(-1)
				sh.list.touch(t)
				return t
			}
		}
		if s == nil {
			g.tracked.Add(-1)
			return nil
		}
	}
	if s == nil {
		s = &source{}
	}
	*s = source{addr: a, tokens: g.burst, seen: now, failures: s.failures[:0]}
	sh.m[a] = s
	sh.list.pushFront(s)
	return s
}

// evictFrom forgets the least recently seen blameless source among the
// evictScan oldest of sh, which must be locked, and returns it for reuse
// (nil when it found none). A source it passes over (one with failures or
// a ban) moves to the front, so the next eviction looks at others: the
// order is an approximate LRU. Nothing else refers to the source returned:
// sources are only used under their shard's lock.
func (g *Guard) evictFrom(sh *shard, now time.Duration) *source {
	for range evictScan {
		s := sh.list.tail
		if s == nil {
			return nil
		}
		if g.blameless(s, now) {
			sh.list.remove(s)
			delete(sh.m, s.addr)
			g.tracked.Add(-1)
			g.evicted.Add(1)
			g.evictLog.pending.Add(1) // reported by the janitor, off the shard lock
			return s
		}
		sh.list.touch(s)
	}
	return nil
}

// evictElsewhere evicts from the shards other than skip, one locked at a
// time; the caller holds no shard lock.
func (g *Guard) evictElsewhere(skip *shard, now time.Duration) *source {
	for i := range g.shard {
		sh := &g.shard[i]
		if sh == skip {
			continue
		}
		sh.mu.Lock()
		s := g.evictFrom(sh, now)
		sh.mu.Unlock()
		if s != nil {
			return s
		}
	}
	return nil
}

// failOpen counts an admission or failure the full tracker could not
// track, and logs the first of each minute with the count of the others.
func (g *Guard) failOpen() {
	g.untracked.Add(1)
	g.failOpenLog.note(g.clock(), g.logFailOpen)
}

func (g *Guard) logFailOpen(n uint64) {
	g.log.Warn("security tracker full of sources with failures or bans: admitting without tracking",
		"untracked", n, "max_tracked", g.maxTracked)
}

// flushLogs writes the rate-limited log lines still owed.
func (g *Guard) flushLogs() {
	now := g.clock()
	g.failOpenLog.flush(now, g.logFailOpen)
	g.evictLog.flush(now, func(n uint64) {
		g.log.Warn("security tracker full: least recently seen sources without failures or bans evicted",
			"evicted", n, "max_tracked", g.maxTracked)
	})
	g.accounts.lockLog.flush(now, func(n uint64) {
		g.log.Warn("accounts locked against password guessing", "locks", n)
	})
	g.accounts.refuseLog.flush(now, func(n uint64) {
		g.log.Warn("valid credentials refused: accounts locked against password guessing", "refused", n)
	})
}

// rateLog reports a recurring event at most once per failOpenLogEvery,
// with the number of events since the last report.
type rateLog struct {
	last    atomic.Int64 // clock offset of the last report, +1 (0: never)
	pending atomic.Uint64
}

// note records one event and reports when a report is due.
func (r *rateLog) note(now time.Duration, report func(n uint64)) {
	r.pending.Add(1)
	r.flush(now, report)
}

// flush reports the pending events if the last report is old enough.
func (r *rateLog) flush(now time.Duration, report func(n uint64)) {
	last := r.last.Load()
	if r.pending.Load() == 0 || (last != 0 && now-time.Duration(last-1) < failOpenLogEvery) {
		return
	}
	if !r.last.CompareAndSwap(last, int64(now)+1) {
		return
	}
	if n := r.pending.Swap(0); n > 0 {
		report(n)
	}
}
