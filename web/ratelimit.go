package web

import (
	"math"
	"sync"
	"time"
)

// Failed-authentication bucket per socket peer: fixed by the
// specification, not configurable.
const (
	authFailPerMinute = 10
	authFailBurst     = 5
	// maxPeers bounds the failed-authentication table.
	maxPeers = 8192
	// sweepEvery spaces full sweeps of a full table.
	sweepEvery = time.Second
)

// bucket is a token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// limiter is a set of token buckets keyed by a string (a token name or a
// peer address), holding at most max keys.
type limiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

func newLimiter(perMinute, burst float64, max int, now func() time.Time) *limiter {
	if burst < 1 {
		burst = 1
	}
	return &limiter{rate: perMinute / 60, burst: burst, max: max, now: now, buckets: map[string]*bucket{}}
}

// refill brings b up to now and returns its tokens.
func (l *limiter) refill(b *bucket, now time.Time) {
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el*l.rate)
	}
	b.last = now
}

// wait is how long until b holds one token.
func (l *limiter) wait(b *bucket) time.Duration {
	if b.tokens >= 1 || l.rate <= 0 {
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// take spends one token of key; when none is left it reports how long
// until one is.
func (l *limiter) take(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		l.makeRoom(now)
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	if b.tokens < 1 {
		return false, l.wait(b)
	}
	b.tokens--
	return true, 0
}

// check reports whether key has a token left, without spending it.
func (l *limiter) check(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		return true, 0
	}
	l.refill(b, l.now())
	if b.tokens < 1 {
		return false, l.wait(b)
	}
	return true, 0
}

// makeRoom keeps the table below max: buckets that have refilled are the
// same as new ones and go first; then arbitrary ones. The full sweep runs
// at most once per sweepEvery, so a spray of new addresses costs O(1)
// per request, not a walk of the table each time.
func (l *limiter) makeRoom(now time.Time) {
	if l.max <= 0 || len(l.buckets) < l.max {
		return
	}
	if now.Sub(l.lastSweep) >= sweepEvery || now.Before(l.lastSweep) {
		l.lastSweep = now
		for k, b := range l.buckets {
			l.refill(b, now)
			if b.tokens >= l.burst {
				delete(l.buckets, k)
			}
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < l.max {
			break
		}
		delete(l.buckets, k)
	}
}

// keep drops every key for which keep returns false.
func (l *limiter) keep(keep func(string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.buckets {
		if !keep(k) {
			delete(l.buckets, k)
		}
	}
}

// size is the number of keys held.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// retryAfter renders a wait as whole seconds, at least 1.
func retryAfter(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	return max(s, 1)
}
