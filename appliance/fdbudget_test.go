package appliance

import "testing"

// TestMediaPortBudget: the RTP sockets (two a leg) leave a sixteenth of the
// open file limit (at least 1,024, at most half the limit) to the rest of
// the process.
func TestMediaPortBudget(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{
		{0, 0},         // unknown: the range alone bounds
		{1 << 40, 0},   // unlimited
		{65536, 30720}, // the unit's LimitNOFILE: (65536-4096)/2
		{20000, 9375},  // (20000-1250)/2
		{4096, 1536},   // (4096-1024)/2
		{1200, 300},    // the rest capped at half the limit
		{1, 1},         // never none
	} {
		if got := mediaPortBudget(c.nofile); got != c.want {
			t.Errorf("mediaPortBudget(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
	for _, c := range []struct {
		nofile uint64
		want   int
	}{
		{0, 0},          // unknown: cdr's default
		{1 << 40, 0},    // unlimited
		{65536, 2048},   // the unit's LimitNOFILE: 4096/2
		{20000, 625},    // 1250/2
		{4096, 512},     // 1024/2
		{1200, 150},     // 600/4: under 1,024 left, a quarter
		{100, -1},       // too few to hold any
		{1 << 30, 4096}, // never more than cdr's default
	} {
		if got := recordFileBudget(c.nofile); got != c.want {
			t.Errorf("recordFileBudget(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
	if openFileLimit() == 0 {
		t.Error("the open file limit of this process reads as unknown")
	}
}
