package guard

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"pbx/appliance/config"
)

// Defaults applied by New.
const (
	// DefaultMaxTracked bounds the tracker when security.maxTracked is 0.
	DefaultMaxTracked = 20000
	// DefaultSweepInterval is how often the janitor forgets idle sources.
	DefaultSweepInterval = 10 * time.Second
)

// shards spreads tracked sources over this many locks, so read goroutines
// of different sockets rarely wait for each other.
const shards = 32

// Options configures a Guard.
type Options struct {
	// Security is the System's security block, defaults applied.
	Security config.Security
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SweepInterval is the janitor's period; 0 means DefaultSweepInterval.
	SweepInterval time.Duration
	// Accounts completes the security block for the lock of accounts
	// under distributed password guessing.
	Accounts AccountOptions
	// OnBan and OnLift, when set, are told of each ban imposed after
	// authentication failures and each ban the operator lifts, outside the
	// guard's locks. They must be quick.
	OnBan, OnLift func(Ban)
}

// Guard admits or drops packets by source and bans sources that fail
// authentication. It is safe for concurrent use.
type Guard struct {
	log   *slog.Logger
	now   func() time.Time
	epoch time.Time
	sweep time.Duration

	onBan, onLift func(Ban)

	enabled       bool
	trustLoopback bool
	allow, deny   prefixSet
	ratePerNs     float64 // tokens per nanosecond; 0: no packet rate
	burst         float64
	fullAfter     time.Duration // an empty bucket refills in this long
	authFailures  int
	authWindow    time.Duration
	banDuration   time.Duration
	banMax        time.Duration
	maxTracked    int64
	maxDatagram   int

	shard       [shards]shard
	tracked     atomic.Int64
	failOpenLog rateLog
	evictLog    rateLog

	accounts accounts

	packets, denied, rateLimited, banned, oversize atomic.Uint64
	authFails, bansIssued, untracked, evicted      atomic.Uint64
	accountFails, accountLocks, accountRefused     atomic.Uint64
}

type shard struct {
	mu   sync.Mutex
	m    map[netip.Addr]*source
	list lru
	_    [32]byte // keep neighbouring locks off one cache line
}

// source is what the guard remembers of one address. Times are offsets
// from the guard's epoch.
type source struct {
	addr       netip.Addr
	prev, next *source // in the shard's lru, most recently seen first
	tokens     float64
	seen       time.Duration   // last refill
	failures   []time.Duration // authentication failures, oldest first
	since      time.Duration   // start of the last ban
	until      time.Duration   // end of the last ban; active while later than now
	offences   int             // bans so far, forgotten banMax after the last ended
}

// New builds a Guard from the security block. The block is expected to be
// validated; a malformed allow or deny entry is still an error.
func New(opts Options, log *slog.Logger) (*Guard, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sec := opts.Security
	g := &Guard{
		log: log, now: opts.Now, sweep: opts.SweepInterval, onBan: opts.OnBan, onLift: opts.OnLift,
		enabled: sec.Enabled, trustLoopback: sec.TrustLoopback,
		authFailures: sec.AuthFailures, authWindow: sec.AuthWindow.D(),
		banDuration: sec.BanDuration.D(), banMax: sec.BanMax.D(),
		maxTracked: int64(sec.MaxTracked), maxDatagram: sec.MaxDatagram,
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.sweep <= 0 {
		g.sweep = DefaultSweepInterval
	}
	if g.maxTracked <= 0 {
		g.maxTracked = DefaultMaxTracked
	}
	if g.banMax < g.banDuration {
		g.banMax = g.banDuration
	}
	var err error
	if g.allow, err = newPrefixSet(sec.Allow); err != nil {
		return nil, fmt.Errorf("security.allow: %w", err)
	}
	if g.deny, err = newPrefixSet(sec.Deny); err != nil {
		return nil, fmt.Errorf("security.deny: %w", err)
	}
	if sec.PacketRate > 0 {
		g.burst = math.Max(sec.PacketBurst, sec.PacketRate)
		g.ratePerNs = sec.PacketRate / float64(time.Second)
		g.fullAfter = time.Duration(g.burst / g.ratePerNs)
	}
	for i := range g.shard {
		g.shard[i].m = map[netip.Addr]*source{}
	}
	g.accounts.init(sec, opts.Accounts)
	g.epoch = g.now()
	return g, nil
}

// Enabled reports whether admission checks and bans are on.
func (g *Guard) Enabled() bool { return g.enabled }

func (g *Guard) clock() time.Duration { return g.now().Sub(g.epoch) }

func (g *Guard) at(d time.Duration) time.Time { return g.epoch.Add(d) }

func (g *Guard) shardOf(a netip.Addr) *shard {
	b := a.As16()
	h := binary.LittleEndian.Uint64(b[:8]) ^ binary.LittleEndian.Uint64(b[8:])
	h *= 0x9e3779b97f4a7c15
	return &g.shard[h>>(64-5)]
}

// exempt: allow-listed or trusted loopback, never throttled nor banned.
func (g *Guard) exempt(a netip.Addr) bool {
	return (g.trustLoopback && a.IsLoopback()) || g.allow.contains(a)
}

// Admit decides whether a packet from src reaches the SIP stack; it has the
// shape of sipcore.Admitter. It never blocks on I/O and does not allocate
// for a source it already tracks.
func (g *Guard) Admit(src netip.AddrPort, transport string, packet []byte) bool {
	g.packets.Add(1)
	if !g.enabled {
		return true
	}
	a := src.Addr().Unmap()
	if !g.deny.empty() && g.deny.contains(a) {
		g.denied.Add(1)
		return false
	}
	if !g.exempt(a) && !g.throttle(a) {
		return false
	}
	if g.maxDatagram > 0 && len(packet) > g.maxDatagram && transport == "udp" {
		g.oversize.Add(1)
		return false
	}
	return true
}

// throttle applies an active ban and the token bucket; false drops.
func (g *Guard) throttle(a netip.Addr) bool {
	now := g.clock()
	sh := g.shardOf(a)
	sh.mu.Lock()
	s := sh.m[a]
	if s == nil {
		if s = g.track(sh, a, now); s == nil {
			sh.mu.Unlock()
			g.failOpen()
			return true
		}
	} else {
		sh.list.touch(s)
	}
	if s.until > now {
		sh.mu.Unlock()
		g.banned.Add(1)
		return false
	}
	if g.ratePerNs > 0 {
		s.tokens = math.Min(g.burst, s.tokens+float64(now-s.seen)*g.ratePerNs)
		s.seen = now
		if s.tokens < 1 {
			sh.mu.Unlock()
			g.rateLimited.Add(1)
			return false
		}
		s.tokens--
	}
	sh.mu.Unlock()
	return true
}

// Counters are the guard's counts since start. Dropped is the sum of the
// packets refused for any reason (Denied + RateLimited + Banned + Oversize).
type Counters struct {
	Packets      uint64 // every packet seen, admitted or not
	Dropped      uint64
	Denied       uint64 // from a source on the deny list
	RateLimited  uint64 // over the source's packet rate
	Banned       uint64 // from a banned source
	Oversize     uint64 // UDP datagrams above maxDatagram
	AuthFailures uint64 // wrong credentials reported
	BansIssued   uint64 // bans imposed
	// Untracked counts fail-open events: packets admitted and failures
	// ignored because the tracker was full of sources with failures or bans.
	Untracked uint64
	// Evicted counts blameless sources forgotten to make room for new ones.
	Evicted    uint64
	BansActive int
	Tracked    int

	AccountFailures uint64 // wrong credentials for an existing account
	AccountLocks    uint64 // accounts locked against password guessing
	AccountRefused  uint64 // valid credentials refused: account locked, source not trusted
	AccountsLocked  int    // accounts locked now
}

// Counters returns the counts; BansActive walks the tracker.
func (g *Guard) Counters() Counters {
	c := Counters{
		Packets: g.packets.Load(), Denied: g.denied.Load(), RateLimited: g.rateLimited.Load(),
		Banned: g.banned.Load(), Oversize: g.oversize.Load(), AuthFailures: g.authFails.Load(),
		BansIssued: g.bansIssued.Load(), Untracked: g.untracked.Load(), Evicted: g.evicted.Load(),
		Tracked: int(g.tracked.Load()),
	}
	c.Dropped = c.Denied + c.RateLimited + c.Banned + c.Oversize
	now := g.clock()
	for i := range g.shard {
		sh := &g.shard[i]
		sh.mu.Lock()
		for _, s := range sh.m {
			if s.until > now {
				c.BansActive++
			}
		}
		sh.mu.Unlock()
	}
	g.accountCounters(&c, now)
	return c
}

// Run is the janitor: every sweep interval it forgets sources whose state
// is that of a new source. It returns nil when ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	if !g.enabled {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(g.sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			g.sweepIdle()
			g.sweepAccounts()
			g.flushLogs()
		}
	}
}

// sweepIdle forgets every idle source and returns how many it forgot.
func (g *Guard) sweepIdle() int {
	now := g.clock()
	n := 0
	for i := range g.shard {
		sh := &g.shard[i]
		sh.mu.Lock()
		for a, s := range sh.m {
			if g.idle(s, now) {
				sh.list.remove(s)
				delete(sh.m, a)
				n++
			}
		}
		sh.mu.Unlock()
	}
	g.tracked.Add(int64(-n))
	return n
}

// idle: forgetting s changes nothing, since a new source would behave the
// same.
func (g *Guard) idle(s *source, now time.Duration) bool {
	return g.blameless(s, now) && (g.ratePerNs == 0 || now-s.seen >= g.fullAfter)
}
