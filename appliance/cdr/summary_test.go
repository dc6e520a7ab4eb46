package cdr

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

func TestSummarySkipsDays(t *testing.T) {
	base := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	var es []Entry
	for i := range 3000 {
		r := call("a", base.Add(time.Duration(i)*time.Second), i%2 == 0, fmt.Sprintf("+1555%07d", i*7), fmt.Sprintf("+1666%07d", i*13))
		r.Trunk = "alpha"
		r.Direction = calls.DirectionInbound
		n := r.normalize()
		es = append(es, n.Entry())
	}
	sum := newSummary(es)
	all := filter{fromMS: math.MinInt64, upper: pos{math.MaxInt64, idMax}}
	yes, no := true, false
	for _, tc := range []struct {
		name string
		mod  func(f *filter)
		want bool
	}{
		{"no filter", func(f *filter) {}, true},
		{"number present in from", func(f *filter) { f.number = "5550000070" }, true},
		{"number present in to", func(f *filter) { f.number = "6660000130" }, true},
		{"number absent", func(f *filter) { f.number = "9998887777" }, false},
		{"short number", func(f *filter) { f.number = "999" }, true}, // cannot rule out
		{"direction absent", func(f *filter) { f.direction = calls.DirectionOutbound }, false},
		{"trunk absent", func(f *filter) { f.trunk = "beta" }, false},
		{"trunk present", func(f *filter) { f.trunk = "alpha" }, true},
		{"extension absent", func(f *filter) { f.extension = "999" }, false},
		{"answered", func(f *filter) { f.answered = &yes }, true},
		{"unanswered", func(f *filter) { f.answered = &no }, true},
		{"range after", func(f *filter) { f.fromMS = base.Add(time.Hour * 2).UnixMilli() }, false},
		{"range before", func(f *filter) { f.upper = pos{base.Add(-time.Second).UnixMilli(), idMax} }, false},
		{"range inside", func(f *filter) { f.fromMS = base.Add(time.Minute).UnixMilli() }, true},
	} {
		f := all
		tc.mod(&f)
		if got := sum.match(&f); got != tc.want {
			t.Errorf("%s: match = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A day of answered calls only is skipped for answered=false.
	var ans []Entry
	for _, e := range es {
		if e.Answered {
			ans = append(ans, e)
		}
	}
	s2 := newSummary(ans)
	f := all
	f.answered = &no
	if s2.match(&f) {
		t.Error("answered-only day not skipped for unanswered filter")
	}
	// Many distinct extensions: the set gives up and answers maybe.
	var v valueSet
	for i := range maxSetValues + 1 {
		v.add(fmt.Sprint(i))
	}
	if !v.mayHave("nope") {
		t.Error("full set must answer maybe")
	}
}
