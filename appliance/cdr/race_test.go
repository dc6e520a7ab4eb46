package cdr

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestListConcurrentWithCommits pages through listings from several
// goroutines while others commit, with a cache too small to hold a day, so
// that refreshes, tail reads and evictions interleave. Run with -race.
func TestListConcurrentWithCommits(t *testing.T) {
	s := newTestStore(t, nil, func(o *Options) { o.CacheEntries = 50 })
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	initial := seed(t, s, []string{"a", "b"}, 3, 120, base)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := call([]string{"a", "b"}[w], base.Add(-time.Duration(i*w+i)*7*time.Minute), false, "x", "y")
				if err := s.Commit(r); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	errs := make(chan error, 4)
	var lw sync.WaitGroup
	for range 4 {
		lw.Add(1)
		go func() {
			defer lw.Done()
			q := Query{Limit: 13}
			seen := map[ID]bool{}
			var prev *Entry
			for pages := 0; pages < 1000; pages++ {
				p, err := s.List(ctx, q)
				if err != nil {
					errs <- err
					return
				}
				for i := range p.Records {
					e := p.Records[i]
					if seen[e.ID] {
						t.Errorf("repeated %s", e.ID)
					}
					seen[e.ID] = true
					if prev != nil && !newer(prev, &e) {
						t.Errorf("out of order %s then %s", prev.ID, e.ID)
					}
					prev = &e
				}
				if p.NextCursor == "" {
					break
				}
				q.Cursor = p.NextCursor
			}
			for _, r := range initial {
				if !seen[r.ID] {
					t.Errorf("record %s committed before the listing was skipped", r.ID)
				}
			}
		}()
	}
	lw.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
