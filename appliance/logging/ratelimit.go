package logging

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// KindKey is the attribute that names what a record reports, for rate
// limiting: records of one kind share a token bucket. Log sites a remote
// party can trigger at will (malformed input, unknown methods, failed
// authentication) set it, e.g. log.Info("...", logging.KindKey, "sip.malformed").
const KindKey = "kind"

// overflowKind takes the records of every kind seen after Limits.MaxKinds.
const overflowKind = "overflow"

// Limits bound how many lines a flood can write.
type Limits struct {
	// PerKind is the sustained lines per second of one kind, PerKindBurst
	// the lines it may write at once after a quiet period.
	PerKind      float64
	PerKindBurst int
	// Global is the sustained lines per second of all limited records
	// together, GlobalBurst its burst. A kind whose bucket is full (its
	// first line after a quiet period) is written even when the global
	// bucket is empty, so a flood of one kind cannot hide the first line
	// of another.
	Global      float64
	GlobalBurst int
	// Interval is how often a summary line reports, per kind, how many
	// records were suppressed.
	Interval time.Duration
	// MaxKinds bounds the kinds tracked. When it is reached, kinds idle long
	// enough to have refilled are forgotten; if none is, new kinds share one
	// overflow bucket.
	MaxKinds int
}

// DefaultLimits keep any flood under about 100 lines a second: 10 a second
// per kind (20 at once), 50 a second in all (100 at once), and a summary of
// what was suppressed every 10 seconds.
var DefaultLimits = Limits{PerKind: 10, PerKindBurst: 20, Global: 50, GlobalBurst: 100, Interval: 10 * time.Second, MaxKinds: 512}

// RateLimit is a slog.Handler that passes records to another handler while
// bounding floods. A record is limited when it carries a KindKey attribute
// (its kind is that value) or is at level Warn or above (its kind is its
// level and message); other records (per-call information, debugging) pass
// unlimited. Each kind has a token bucket, and all limited records share a
// global one. Suppressed records are counted per kind, and every
// Limits.Interval a line "suppressed N similar messages" with the kind and
// the count is written for each kind that lost some.
type RateLimit struct {
	next     slog.Handler
	withKind string // a KindKey given through WithAttrs
	grouped  bool   // WithGroup was called: record attributes are nested
	st       *limitState
}

// limitState is shared by a RateLimit and every handler derived from it.
type limitState struct {
	lim    Limits
	now    func() time.Time
	mu     sync.Mutex
	global bucket
	kinds  map[string]*kindState
	pruned time.Time   // last prune of idle kinds
	timer  *time.Timer // pending summary; nil when none is due
}

type kindState struct {
	bucket
	suppressed int
	level      slog.Level   // highest level suppressed since the last summary
	h          slog.Handler // writes the summary, with the suppressed records' attributes
	addKind    bool         // the summary must carry KindKey itself
}

// bucket is a token bucket; a zero last means full.
type bucket struct {
	tokens float64
	last   time.Time
}

// take refills the bucket for the time since the last call and takes one
// token; full reports whether the bucket was full before.
func (b *bucket) take(now time.Time, rate float64, burst int) (ok, full bool) {
	if b.last.IsZero() {
		b.tokens = float64(burst)
	} else {
		b.tokens = min(float64(burst), b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	full = b.tokens >= float64(burst)
	if b.tokens < 1 {
		return false, full
	}
	b.tokens--
	return true, full
}

// NewRateLimit returns a handler that writes to next within lim.
func NewRateLimit(next slog.Handler, lim Limits) *RateLimit {
	if lim.MaxKinds <= 0 {
		lim.MaxKinds = DefaultLimits.MaxKinds
	}
	if lim.Interval <= 0 {
		lim.Interval = DefaultLimits.Interval
	}
	return &RateLimit{next: next, st: &limitState{lim: lim, now: time.Now, kinds: map[string]*kindState{}}}
}

// Enabled reports whether the next handler takes records at level.
func (h *RateLimit) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// WithAttrs returns a handler whose records carry attrs; a KindKey among
// them names the kind of every record it writes.
func (h *RateLimit) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	if !h.grouped {
		for _, a := range attrs {
			if a.Key == KindKey {
				c.withKind = a.Value.String()
			}
		}
	}
	return &c
}

// WithGroup returns a handler that nests later attributes under name.
func (h *RateLimit) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.grouped = c.grouped || name != ""
	return &c
}

// Handle writes r unless its kind, or all limited records together, are
// over their rate.
func (h *RateLimit) Handle(ctx context.Context, r slog.Record) error {
	kind, inHandler := h.kind(r)
	if kind == "" {
		return h.next.Handle(ctx, r)
	}
	if !h.st.admit(kind, r.Level, h.next, !inHandler) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// kind names r's kind: its KindKey attribute, else its level and message
// when it is a warning or worse, else nothing (not limited). inHandler
// reports that the kind came through WithAttrs, so the next handler
// already writes it.
func (h *RateLimit) kind(r slog.Record) (kind string, inHandler bool) {
	if !h.grouped {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == KindKey {
				kind = a.Value.String()
				return false
			}
			return true
		})
		if kind != "" {
			return kind, false
		}
	}
	if h.withKind != "" {
		return h.withKind, true
	}
	if r.Level >= slog.LevelWarn {
		return r.Level.String() + " " + r.Message, false
	}
	return "", false
}

// admit takes a token for kind; when it cannot, it counts the record as
// suppressed and makes sure a summary is due.
func (st *limitState) admit(kind string, level slog.Level, h slog.Handler, addKind bool) bool {
	now := st.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	k := st.kinds[kind]
	if k == nil {
		if len(st.kinds) >= st.lim.MaxKinds {
			st.prune(now)
		}
		if len(st.kinds) >= st.lim.MaxKinds {
			kind = overflowKind
			k = st.kinds[kind]
		}
		if k == nil {
			k = &kindState{}
			st.kinds[kind] = k
		}
	}
	ok, full := k.take(now, st.lim.PerKind, st.lim.PerKindBurst)
	if ok {
		if gok, _ := st.global.take(now, st.lim.Global, st.lim.GlobalBurst); gok || full {
			return true
		}
		// Over the global cap: the kind's token is not given back, so a
		// kind that keeps the global bucket empty stays suppressed.
	}
	if k.suppressed == 0 || level > k.level {
		k.level = level
	}
	if k.suppressed == 0 {
		k.h, k.addKind = h, addKind
	}
	k.suppressed++
	if st.timer == nil {
		st.timer = time.AfterFunc(st.lim.Interval, func() { st.flush(context.Background()) })
	}
	return false
}

// prune forgets the kinds whose bucket has refilled and that have nothing
// suppressed, at most once a second, so that kinds seen long ago do not push
// new ones into the overflow bucket.
func (st *limitState) prune(now time.Time) {
	if now.Sub(st.pruned) < time.Second {
		return
	}
	st.pruned = now
	refill := time.Duration(float64(st.lim.PerKindBurst) / st.lim.PerKind * float64(time.Second))
	for kind, k := range st.kinds {
		if k.suppressed == 0 && now.Sub(k.last) >= refill {
			delete(st.kinds, kind)
		}
	}
}

// summary is one kind's suppressed count, taken for writing.
type summary struct {
	kind    string
	n       int
	level   slog.Level
	h       slog.Handler
	addKind bool
}

// Flush writes the summary of every kind with suppressed records now
// (at shutdown, or in tests), without waiting for the interval.
func (h *RateLimit) Flush(ctx context.Context) { h.st.flush(ctx) }

func (st *limitState) flush(ctx context.Context) {
	st.mu.Lock()
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	var out []summary
	for kind, k := range st.kinds {
		if k.suppressed > 0 {
			out = append(out, summary{kind, k.suppressed, k.level, k.h, k.addKind})
			k.suppressed, k.h = 0, nil
		}
	}
	now := st.now()
	st.mu.Unlock()
	for _, s := range out {
		r := slog.NewRecord(now, s.level, fmt.Sprintf("suppressed %d similar messages", s.n), 0)
		if s.addKind {
			r.AddAttrs(slog.String(KindKey, s.kind))
		}
		r.AddAttrs(slog.Int("suppressed", s.n))
		_ = s.h.Handle(ctx, r)
	}
}
