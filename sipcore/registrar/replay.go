package registrar

import (
	"sync"
	"sync/atomic"
	"time"
)

// The replay table remembers, for every nonce that authenticated a request
// and has not expired, the highest nc seen, so that a replayed nc is
// refused. It is kept in generations by the nonces' expiry second: a nonce
// carries its issue time, so its generation is known before it is looked
// up, and a generation whose nonces have all expired is dropped whole (its
// map let go) instead of swept entry by entry. After a load the table's
// memory thus returns second by second as the load's nonces expire, with no
// pass over the live entries and no copy of them into a smaller map (Go
// maps never shrink; the design this replaced swept every shard every
// 1,024 inserts and every 2 s, and copied a shard once it held under half
// its high-water mark).
//
// Measured (BenchmarkNonceTableMemoryReturn: 480,000 nonces, as a
// 16,000/s REGISTER load leaves within the 30 s TTL, three runs each):
// filling the table took 23-27 ms and allocated 13.6 MB, against 86-103
// ms and 36 MB with the sweeps and copies; full it holds 12.5 MB against
// 17.3; with half its nonces expired 6.3 MB against 5.5 (a fresh copy is
// packed tighter than maps that grew). After a REGISTER load the copies
// were most of what the idle process allocated: 3.1 MB at once, 20 s
// after the load, when the table fell under half its high-water mark.

// ncShards is the number of independently locked parts of the table.
const ncShards = 32

// nonceSweepEvery is how often the sweep timer drops expired generations
// while any nonce is tracked. Inserts drop them too when a shard is full,
// but once a load ends nothing is inserted, and without the timer its
// nonces would stay in the table for good.
const nonceSweepEvery = time.Second

// replayGenerations is about how many generations a nonce's lifetime spans:
// a generation is one second of expiry for TTLs up to this many seconds,
// longer for longer TTLs, so that a shard's ring stays this short.
const replayGenerations = 30

// nonceKey is the first half of a nonce's MAC: unique per issued nonce
// (two of a million tracked nonces share one with a chance of about 1 in
// 10^7, and the MAC is keyed with the secret, so a client cannot make them
// meet; if they do, the later one may be refused as a replay and its
// client challenged again), and smaller than the nonce text.
type nonceKey [8]byte

// replayTable is the nc replay table (see the comment at the top of the
// file).
type replayTable struct {
	width    int64 // seconds of expiry per generation
	ttl      int64 // the nonce TTL in whole seconds, rounded up
	shardCap int   // entries per shard, expired ones not yet dropped included
	now      func() time.Time
	shards   [ncShards]replayShard
	// sweeping is set while a sweep timer is armed: from the first
	// tracked nonce until the table is empty again.
	sweeping atomic.Bool
}

// replayShard is a ring of generations; generation g sits in slot g mod
// its length.
type replayShard struct {
	mu   sync.Mutex
	gens []replayGen
	n    int // entries of the maps in gens
}

// replayGen holds the last nc of the nonces expiring within one
// generation: at unix seconds [g*width, (g+1)*width).
type replayGen struct {
	g int64
	m map[nonceKey]uint32
}

func newReplayTable(ttl time.Duration, tracked int, now func() time.Time) *replayTable {
	ttlS := max(int64((ttl+time.Second-1)/time.Second), 1)
	t := &replayTable{
		width:    max((ttlS+replayGenerations-1)/replayGenerations, 1),
		ttl:      ttlS,
		shardCap: max(tracked/ncShards, 1),
		now:      now,
	}
	// A valid nonce expires within [now, now+ttl]: at most ttl/width+2
	// generations are live at once, and one more slot keeps a live
	// generation from ever sharing a slot with another (see use).
	ring := int(ttlS/t.width) + 3
	for i := range t.shards {
		t.shards[i].gens = make([]replayGen, ring)
	}
	return t
}

// use records nc for the nonce key expiring at expires (not yet passed at
// now). It fails for an nc not above the last one seen (a replay), when
// the shard is full, and for a nonce that would expire later than one
// issued now (the clock was set back since it was issued).
func (t *replayTable) use(key nonceKey, nc uint32, expires, now time.Time) bool {
	e, nowS := expires.Unix(), now.Unix()
	if e < 0 || e > nowS+t.ttl {
		return false
	}
	g := e / t.width
	sh := &t.shards[key[0]%ncShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	slot := &sh.gens[g%int64(len(sh.gens))]
	if slot.g == g && slot.m != nil {
		if last, ok := slot.m[key]; ok {
			if nc <= last {
				return false
			}
			slot.m[key] = nc
			return true
		}
	}
	if slot.g != g {
		if slot.g > g && slot.m != nil {
			return false // cannot happen for a valid nonce; refuse rather than drop live entries
		}
		// An older generation in the slot has expired as a whole.
		sh.n -= len(slot.m)
		slot.g, slot.m = g, nil
	}
	if sh.n >= t.shardCap {
		sh.dropExpired(nowS, t.width)
		if sh.n >= t.shardCap {
			return false
		}
	}
	if slot.m == nil {
		// Sized as the generation before it ended: under a steady load
		// the map does not grow through its smaller sizes.
		hint := 0
		if prev := &sh.gens[(g-1)%int64(len(sh.gens))]; prev.g == g-1 {
			hint = len(prev.m)
		}
		slot.m = make(map[nonceKey]uint32, hint)
	}
	slot.m[key] = nc
	sh.n++
	if !t.sweeping.Load() && t.sweeping.CompareAndSwap(false, true) {
		time.AfterFunc(nonceSweepEvery, t.sweepTick)
	}
	return true
}

// dropExpired lets go of the generations whose nonces have all expired at
// nowS. The caller holds sh.mu.
func (sh *replayShard) dropExpired(nowS, width int64) {
	for i := range sh.gens {
		slot := &sh.gens[i]
		if slot.m != nil && nowS >= (slot.g+1)*width {
			sh.n -= len(slot.m)
			slot.m = nil
		}
	}
}

// sweepTick runs on the sweep timer: it drops every expired generation,
// and arms the timer again while nonces remain tracked. An idle table
// holds no timer.
func (t *replayTable) sweepTick() {
	nowS := t.now().Unix()
	left := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.dropExpired(nowS, t.width)
		left += sh.n
		sh.mu.Unlock()
	}
	if left > 0 {
		time.AfterFunc(nonceSweepEvery, t.sweepTick)
		return
	}
	t.sweeping.Store(false)
	// An insert between the count and the store saw the timer armed and
	// armed none: look once more.
	if t.count() > 0 && t.sweeping.CompareAndSwap(false, true) {
		time.AfterFunc(nonceSweepEvery, t.sweepTick)
	}
}

// count is the number of nonces tracked, expired ones not yet dropped
// included.
func (t *replayTable) count() int {
	n := 0
	for i := range t.shards {
		t.shards[i].mu.Lock()
		n += t.shards[i].n
		t.shards[i].mu.Unlock()
	}
	return n
}
