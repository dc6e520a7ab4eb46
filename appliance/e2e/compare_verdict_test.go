package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompareVerdicts checks the pass rule and the table cells of
// BenchmarkCompareKamailio on made-up SIPp statistics, without running it.
func TestCompareVerdicts(t *testing.T) {
	ok := func(created, okN, failed, retrans int, p99 time.Duration) sippStats {
		return sippStats{Created: created, OK: okN, Failed: failed, Retrans: retrans, SetupP99: p99}
	}
	w := 10 * time.Second
	cases := []struct {
		name             string
		step             compareStep
		sustained, clean bool
	}{
		{"all done, fast", judgeStep(100, 1000, ok(1000, 1000, 0, 0, 20*time.Millisecond), w), true, true},
		{"slow p99", judgeStep(100, 1000, ok(1000, 1000, 0, 0, 100*time.Millisecond), w), true, false},
		{"retransmissions", judgeStep(100, 1000, ok(1000, 1000, 0, 3, 5*time.Millisecond), w), true, false},
		{"p99 beyond the buckets", judgeStep(100, 1000, ok(1000, 1000, 0, 0, -1), w), true, false},
		{"1% failed", judgeStep(100, 1000, ok(1000, 990, 10, 0, 5*time.Millisecond), w), false, false},
		{"under 95% of the rate", judgeStep(100, 1000, ok(1000, 940, 0, 0, 5*time.Millisecond), w), false, false},
		{"fewer created than offered", judgeStep(100, 1000, ok(900, 900, 0, 0, 5*time.Millisecond), 9*time.Second), false, false},
	}
	for _, c := range cases {
		if c.step.sustained != c.sustained || c.step.clean != c.clean {
			t.Errorf("%s: sustained %t clean %t, want %t %t", c.name, c.step.sustained, c.step.clean, c.sustained, c.clean)
		}
	}

	l := ladder{rates: []int{100, 200, 300, 400}, steps: []compareStep{
		{rate: 100, sustained: true},
		{rate: 200, sustained: true, clean: true},
		{rate: 300, sustained: true},
		{rate: 400},
	}}
	if best, _ := l.best(); best.rate != 300 {
		t.Errorf("best %d, want 300", best.rate)
	}
	if clean, _ := l.lastClean(); clean.rate != 200 {
		t.Errorf("highest clean %d, want 200", clean.rate)
	}
	if l.topped() || !strings.HasPrefix(ladderCell(l), "300/s") {
		t.Errorf("a ladder that failed at 400 shows %q", ladderCell(l))
	}
	l.steps = l.steps[:3]
	l.rates = l.rates[:3]
	if !l.topped() || !strings.HasPrefix(ladderCell(l), ">= 300/s") {
		t.Errorf("a ladder sustained to its top shows %q", ladderCell(l))
	}
	if c := ladderCell(ladder{rates: []int{100}, steps: []compareStep{{rate: 100}}}); c != "under 100/s" {
		t.Errorf("nothing sustained shows %q", c)
	}
	if r := ratio(-5, 10); r != 0 {
		t.Errorf("ratio of a negative memory delta %v, want none", r)
	}
}

// TestAnsweredCalls reads the setups a SIPp statistics file has timed.
func TestAnsweredCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "uac.stat.csv")
	if n := answeredCalls(path); n != 0 {
		t.Fatalf("no file: %d", n)
	}
	csv := "StartTime;TotalCallCreated;ResponseTimeRepartitionsetup_<5;ResponseTimeRepartitionsetup_<10;ResponseTimeRepartitionsetup_>=10;\n" +
		"x;10;1;0;0;\nx;20;7;2;1;\n"
	if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := answeredCalls(path); n != 10 {
		t.Fatalf("answered %d, want 10 (the last line's buckets)", n)
	}
}
