package cdr

import (
	"context"
	"os"
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
