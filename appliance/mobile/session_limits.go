package mobile

import (
	"sync"
	"time"
)

// Login failure buckets (DESIGN.md 5.3).
const (
	loginFailuresPerAccount = 5
	loginAccountWindow      = 15 * time.Minute
	loginFailuresPerSource  = 20
	loginSourceWindow       = time.Minute
	// maxFailureKeys bounds each table of failures.
	maxFailureKeys = 16384
)

// failures counts failed logins per key in a sliding window: at most limit
// failures within window; past that the key is refused until the oldest
// one leaves the window.
type failures struct {
	limit  int
	window time.Duration
	max    int

	mu sync.Mutex
	m  map[string][]time.Time
}

func newFailures(limit int, window time.Duration, max int) *failures {
	return &failures{limit: limit, window: window, max: max, m: map[string][]time.Time{}}
}

// live drops the failures of key older than the window and returns the rest.
func (f *failures) live(key string, now time.Time) []time.Time {
	ts := f.m[key]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= f.window {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(f.m, key)
	} else {
		f.m[key] = ts
	}
	return ts
}

// check reports whether key may try again, and if not how long it waits.
func (f *failures) check(key string, now time.Time) (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ts := f.live(key, now)
	if len(ts) < f.limit {
		return true, 0
	}
	return false, ts[len(ts)-f.limit].Add(f.window).Sub(now)
}

// add records a failure of key.
func (f *failures) add(key string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ts := f.live(key, now)
	if ts == nil && len(f.m) >= f.max {
		for k := range f.m {
			f.live(k, now)
		}
		for k := range f.m {
			if len(f.m) < f.max {
				break
			}
			delete(f.m, k)
		}
	}
	if len(ts) >= f.limit {
		ts = ts[1:]
	}
	f.m[key] = append(ts, now)
}
