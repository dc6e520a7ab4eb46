package cdr

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// Run is the store's long-running part: the retention janitor (a first
// pass at once, then every SweepInterval) and, after the first pass, a
// warm-up that reads every day's index summary so the first filtered
// listings do not pay for it; the batched sync of in-flight markers, their
// refresh every Options.MarkerRefresh, and the retries of pending records
// (Options.RetryMin doubling up to RetryMax, or at once when another write
// succeeds). It returns nil when ctx is cancelled.
func (s *Store) Run(ctx context.Context) error {
	sweep := func() {
		if s.opts.Retention == 0 {
			return
		}
		removed, err := s.Sweep(ctx, s.opts.Now())
		if err != nil {
			s.log.Error("call record retention", "err", err)
		}
		if len(removed) > 0 {
			s.log.Info("call record retention", "days_removed", len(removed))
		}
	}
	sweep()
	if err := s.Warm(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("call record index warm-up", "err", err)
	}
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	m := time.NewTicker(MarkerSyncInterval)
	defer m.Stop()
	syncMarkers := func() {
		if err := s.syncMarkers(); err != nil {
			s.log.Error("sync in-flight call markers", "err", err)
		}
	}
	refresh := time.NewTicker(s.opts.MarkerRefresh)
	defer refresh.Stop()
	retry := time.NewTicker(min(s.opts.RetryMin, time.Second))
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush()
			s.shutdown()
			syncMarkers()
			return nil
		case <-t.C:
			sweep()
		case <-m.C:
			syncMarkers()
		case <-refresh.C:
			s.RefreshMarkers()
		case <-retry.C:
			s.retryDue(false)
		case <-s.bl.kick:
			s.retryDue(true)
		}
	}
}

// shutdown makes a last attempt at the pending records and says what is
// lost with the process: the records of unanswered calls, and the exact
// end of answered ones (recovered from their markers at the next start).
func (s *Store) shutdown() {
	if s.bl.n.Load() == 0 {
		return
	}
	if left := s.RetryPending(); left > 0 {
		b := s.Backlog()
		s.log.Error("call records not written at shutdown; answered calls are recovered from their in-flight markers at the next start, others are lost",
			"pending", left, "err", b.Err)
	}
}

// Sweep removes every whole day directory (records and index) whose local
// day ended at or before now minus the retention. Empty month and year
// directories go too. It returns the removed directories relative to the
// data directory. With zero retention it removes nothing.
func (s *Store) Sweep(ctx context.Context, now time.Time) ([]string, error) {
	if s.opts.Retention == 0 {
		return nil, nil
	}
	cutoff := now.Add(-s.opts.Retention)
	tenants, err := s.tenants()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, t := range tenants {
		loc := s.location(t)
		days, err := s.listDays(t, date{}, date{})
		if err != nil {
			return removed, fmt.Errorf("list days of %s: %w", t, err)
		}
		for _, d := range days {
			if err := ctx.Err(); err != nil {
				return removed, err
			}
			end := time.Date(d.date.y, time.Month(d.date.m), d.date.d+1, 0, 0, 0, 0, loc)
			if end.After(cutoff) {
				continue
			}
			if err := os.RemoveAll(d.dir); err != nil {
				return removed, fmt.Errorf("remove %s: %w", d.dir, err)
			}
			s.cache.forget(d.index())
			rel, _ := filepath.Rel(s.root, d.dir)
			removed = append(removed, rel)
			// Month and year directories left empty; Remove fails on a
			// non-empty directory, which is what we want.
			month := filepath.Dir(d.dir)
			if os.Remove(month) == nil {
				_ = os.Remove(filepath.Dir(month))
			}
		}
	}
	return removed, nil
}

// Warm reads the summary of every day's index, oldest first, so that the
// newest days' lines are the ones left in memory.
func (s *Store) Warm(ctx context.Context) error {
	tenants, err := s.tenants()
	if err != nil {
		return err
	}
	all := filter{fromMS: math.MinInt64, upper: pos{math.MaxInt64, idMax}}
	for _, t := range tenants {
		days, err := s.listDays(t, date{}, date{})
		if err != nil {
			return err
		}
		for i := len(days) - 1; i >= 0; i-- {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := s.cache.view(days[i].index(), &all, false); err != nil {
				return fmt.Errorf("read index %s %s: %w", t, days[i].date, err)
			}
		}
	}
	return nil
}
