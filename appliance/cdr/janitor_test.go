package cdr

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestSweepRemovesWholeDaysOnly(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	s := newTestStore(t, map[string]*time.Location{"acme": ny}, func(o *Options) { o.Retention = 30 * 24 * time.Hour })
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, ny)
	// Days 29..33 back, calls at 00:30 and 23:30 local.
	for back := 29; back <= 33; back++ {
		d := now.AddDate(0, 0, -back)
		for _, hm := range [][2]int{{0, 30}, {23, 30}} {
			commit(t, s, call("acme", time.Date(d.Year(), d.Month(), d.Day(), hm[0], hm[1], 0, 0, ny), false, "1", "2"))
		}
	}
	// Warm the cache so that removal must invalidate it.
	if p, _ := s.List(context.Background(), Query{}); len(p.Records) != 10 {
		t.Fatalf("before sweep: %d records", len(p.Records))
	}
	// The cutoff is 2026-10-22 12:00 local: the day of 21 October ended at
	// 2026-10-22 00:00 and goes; 22 October (holding a call before the
	// cutoff) stays whole.
	removed, err := s.Sweep(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"acme/cdr/2026/10/21", "acme/cdr/2026/10/20", "acme/cdr/2026/10/19"}
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, d := range []string{"22", "23"} {
		lines := readLines(t, filepath.Join(s.root, "acme", "cdr", "2026", "10", d, IndexFile))
		if len(lines) != 2 {
			t.Fatalf("day %s kept %d lines, want 2", d, len(lines))
		}
	}
	p, err := s.List(context.Background(), Query{})
	if err != nil || len(p.Records) != 4 {
		t.Fatalf("after sweep: %d records, %v", len(p.Records), err)
	}
	// Sweeping again removes nothing; a month emptied entirely goes.
	if again, _ := s.Sweep(context.Background(), now); len(again) != 0 {
		t.Fatalf("second sweep removed %v", again)
	}
	if _, err := s.Sweep(context.Background(), now.AddDate(0, 2, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "acme", "cdr", "2026", "10")); !os.IsNotExist(err) {
		t.Fatalf("empty month directory left: %v", err)
	}
}

func TestSweepZeroRetentionKeepsAll(t *testing.T) {
	s := newTestStore(t, nil, nil)
	commit(t, s, call("acme", time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), false, "1", "2"))
	removed, err := s.Sweep(context.Background(), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || len(removed) != 0 {
		t.Fatalf("removed %v %v", removed, err)
	}
}

func TestRunSweepsAtStartAndStops(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	s := newTestStore(t, nil, func(o *Options) {
		o.Retention = 24 * time.Hour
		o.Now = func() time.Time { return now }
	})
	old := call("acme", now.AddDate(0, 0, -5), false, "1", "2")
	fresh := call("acme", now.Add(-time.Hour), false, "1", "2")
	commit(t, s, old)
	commit(t, s, fresh)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	oldDay := s.dayDir("acme", old.Start)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(oldDay); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first sweep did not run")
		}
		time.Sleep(10 * time.Millisecond) // polling the file system with a deadline
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := s.Get(context.Background(), "acme", fresh.ID); err != nil {
		t.Fatalf("fresh record removed: %v", err)
	}
}
