package cdr

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

// TestMarkersFlushedByRun: a marker is renamed into place at once (a killed
// process loses nothing) and Run flushes written markers to disk within
// MarkerSyncInterval, clearing the pending flag.
func TestMarkersFlushedByRun(t *testing.T) {
	s, err := New(Options{DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	r := NewRecord("acme", calls.DirectionInternal, time.Now().Add(-time.Second))
	r.SetAnswer(time.Now(), "101")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.MarkerPath("acme", r.ID)); err != nil {
		t.Fatalf("marker not in place after Answered: %v", err)
	}
	deadline := time.Now().Add(10 * MarkerSyncInterval)
	for s.markersDirty.Load() {
		if time.Now().After(deadline) {
			t.Fatal("markers not flushed by Run")
		}
		time.Sleep(MarkerSyncInterval / 5)
	}
}

// TestConcurrentCommitsShareJournalSyncs: calls ending at once share the
// commit journal's fdatasyncs that make their records durable, and every
// record is committed once.
func TestConcurrentCommitsShareJournalSyncs(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	const workers, each = 16, 10
	var wg sync.WaitGroup
	recs := make([][]*Record, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := call("acme", start.Add(time.Duration(w*each+i)*time.Second), false, "100", fmt.Sprint(w, i))
				if err := s.Commit(r); err != nil {
					t.Error(err)
				}
				recs[w] = append(recs[w], r)
			}
		}()
	}
	wg.Wait()
	for _, rs := range recs {
		for _, r := range rs {
			committedOnce(t, s, r)
		}
	}
	if n := s.journal.Load().syncs.Load(); n == 0 || n >= workers*each {
		t.Fatalf("%d journal fdatasyncs for %d concurrent commits, want at least one and fewer than one each", n, workers*each)
	} else {
		t.Logf("%d journal fdatasyncs for %d commits, %d waited for commits under way", n, workers*each, s.journal.Load().gathers.Load())
	}
	if n := s.dirSyncs.runs.Load(); n != 0 {
		t.Fatalf("%d directory fsyncs with the journal, want none", n)
	}
}
