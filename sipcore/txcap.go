package sipcore

import (
	"context"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo/sip"
)

// txTracker counts the server transactions handed to handlers, by key, until
// each terminates. The UDP readers consult it to refuse new requests past
// the cap (Options.MaxServerTransactions) while still passing retransmissions
// of open transactions to the stack.
type txTracker struct {
	max  int
	n    atomic.Int64 // len(open), read without the lock on every packet
	mu   sync.Mutex
	open map[string]*sip.ServerTx
	peak int // most open since the last takePeak
}

func newTxTracker(max int) *txTracker {
	return &txTracker{max: max, open: make(map[string]*sip.ServerTx)}
}

// track records tx until it terminates. Tracking the same transaction twice
// (a handler wrapping another) is harmless.
func (t *txTracker) track(tx sip.ServerTransaction) {
	if w, ok := tx.(serverTx); ok {
		tx = w.ServerTransaction
	}
	stx, ok := tx.(*sip.ServerTx)
	if !ok {
		return
	}
	key := stx.Key()
	t.mu.Lock()
	if t.open[key] == stx {
		t.mu.Unlock()
		return
	}
	t.open[key] = stx
	t.n.Store(int64(len(t.open)))
	t.peak = max(t.peak, len(t.open))
	t.mu.Unlock()
	// The callback runs under the transaction's own locks: it must only
	// touch the tracker.
	if !stx.OnTerminate(func(string, error) { t.forget(key, stx) }) {
		t.forget(key, stx)
	}
}

// forget drops key when it still names stx (a later transaction may reuse
// the key of one that ended).
func (t *txTracker) forget(key string, stx *sip.ServerTx) {
	t.mu.Lock()
	if t.open[key] == stx {
		delete(t.open, key)
		t.n.Store(int64(len(t.open)))
	}
	t.mu.Unlock()
}

// takePeak returns the most transactions open at once since the last call
// and the number open now.
func (t *txTracker) takePeak() (peak, now int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	peak, now = t.peak, len(t.open)
	t.peak = now
	return peak, now
}

// compact replaces the map of open transactions with one sized for what
// is open now: a Go map keeps the buckets of its largest size (about 90
// bytes per transaction of the peak), and releaseAfterLoad calls this
// once a load is over.
func (t *txTracker) compact() {
	t.mu.Lock()
	defer t.mu.Unlock()
	open := make(map[string]*sip.ServerTx, len(t.open)) // maps.Clone keeps the capacity
	for k, v := range t.open {
		open[k] = v
	}
	t.open = open
}

// full reports whether the cap is reached.
func (t *txTracker) full() bool { return t.n.Load() >= int64(t.max) }

// fullForKnown reports whether the cap and the reserve kept for known
// sources (a quarter of the cap) are both used up.
func (t *txTracker) fullForKnown() bool { return t.n.Load() >= int64(t.max+max(t.max/4, 1)) }

// has reports whether a transaction with key is open.
func (t *txTracker) has(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.open[key]
	return ok
}

// count is the number of open transactions.
func (t *txTracker) count() int { return int(t.n.Load()) }

// admitTx counts tx against the transaction cap and answers 505 to a
// request whose SIP version is not 2.0 (RFC 3261 21.5.6; over UDP the
// readers answer it before a transaction exists, this catches TCP). It
// reports whether the handler should go on.
func (s *Server) admitTx(req *sip.Request, tx sip.ServerTransaction) bool {
	s.txs.track(tx)
	if strings.EqualFold(req.SipVersion, sipVersion) {
		return true
	}
	if req.IsAck() {
		return false
	}
	res := sip.NewResponseFromRequest(req, sip.StatusVersionNotSupported, "Version Not Supported", nil)
	res.SipVersion = sipVersion
	s.DecorateResponse(res)
	if err := tx.Respond(res); err != nil {
		s.log.Debug("respond 505", "err", err)
	}
	s.stats.versionRejected.Add(1)
	return false
}

// releaseEvery is how often Run looks whether a load ended.
const releaseEvery = 5 * time.Second

// releaseFloor is the fewest requests in flight (open transactions and
// cached REGISTER answers) that count as a load worth returning memory
// after: about 10 MB of heap.
const releaseFloor = 5000

// releaseFollowUps is how many more times, one releaseEvery apart, the
// heap is returned after a load's first release: what the load left in
// tables that expire later (digest nonces tracked 30 s, cached REGISTER
// answers) is freed after it, and without a collection (none runs while
// nothing is allocated; GOGC=200 in bin/pbx makes them rarer still) it
// stays in the process. Five more cover the 25 s after the first release.
const releaseFollowUps = 5

// releaseAfterLoad returns the heap of a load to the system once it is
// over. When many requests were in flight at once (open transactions and
// cached REGISTER answers, at least releaseFloor) and they have ended
// (fewer than a tenth of that peak remain), it calls debug.FreeOSMemory:
// measured after a REGISTER flood that filled the cap, the process
// held its peak RSS (about 230 MB) 45 s later because no collection ran
// once allocation stopped (the next forced one is 2 min away) and the
// scavenger returns memory slowly. A collection costs about as much as one
// during the load, and happens at most every releaseEvery. Looking every
// 5 s, a REGISTER load is returned 10 to 15 s after it ends (its answers
// are cached 5 to 10 s). Then it releases again releaseFollowUps times
// (see there), unless a new load starts.
func (s *Server) releaseAfterLoad(ctx context.Context) {
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	var r loadRelease
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		peak, now := s.txs.takePeak()
		cached := s.registers.size()
		switch r.step(peak+cached, now+cached) {
		case releaseFirst:
			s.txs.compact()
			s.runLoadOver()
			debug.FreeOSMemory()
			s.log.Info("sip load over: memory returned", "peak_in_flight", r.last, "in_flight", now+cached)
		case releaseAgain:
			debug.FreeOSMemory()
		}
	}
}

// OnLoadOver adds f to what runs when a load is over, just before its
// memory is returned (releaseAfterLoad's first release): a table that
// keeps entries past the load copies them into fresh memory there, so the
// few of them allocated during the load no longer hold the load's pages
// (an 8 kB span stays in the process while one object in it lives).
func (s *Server) OnLoadOver(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadOver = append(s.loadOver, f)
}

// runLoadOver calls the OnLoadOver functions.
func (s *Server) runLoadOver() {
	s.mu.RLock()
	fs := slices.Clone(s.loadOver)
	s.mu.RUnlock()
	for _, f := range fs {
		f()
	}
}

// releaseAction is what loadRelease.step asks for.
type releaseAction int

const (
	releaseNone  releaseAction = iota
	releaseFirst               // a load just ended: compact and release
	releaseAgain               // a follow-up release after a load
)

// loadRelease decides, once per releaseEvery, when releaseAfterLoad
// returns memory. It is its own type so the decision is tested without
// waiting on the ticker.
type loadRelease struct {
	high      int // most in flight since the last release
	last      int // high at the last first release (for the log)
	followUps int // follow-up releases left
}

// step takes the most requests in flight since the previous step and the
// number in flight now.
func (r *loadRelease) step(peak, now int) releaseAction {
	r.high = max(r.high, peak)
	if r.high >= releaseFloor && now <= r.high/10 {
		r.last, r.high, r.followUps = r.high, 0, releaseFollowUps
		return releaseFirst
	}
	if r.followUps == 0 {
		return releaseNone
	}
	if peak >= releaseFloor {
		// Load again (or the tail of the last one, such as REGISTER
		// answers still cached at the first release): no collection
		// during it; its end is a first release again, with its own
		// follow-ups.
		r.followUps = 0
		return releaseNone
	}
	r.followUps--
	return releaseAgain
}
