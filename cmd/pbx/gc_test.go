package main

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: the daemon's default applies only when GOGC is unset.
func TestGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	setGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("GOGC unset: percent %d, want %d", got, defaultGCPercent)
	}
	setGCPercent(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC=100: percent %d, want 100 (the operator's)", got)
	}
}
