package cdr

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestReindexRebuildsAndIsIdempotent(t *testing.T) {
	s := newTestStore(t, map[string]*time.Location{"jp": mustLoc(t, "Asia/Tokyo")}, nil)
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	recs := seed(t, s, []string{"a", "jp"}, 4, 40, base)
	// Damage: one index gone, one shuffled with garbage.
	d0 := s.dayDir("a", recs[0].Start)
	os.Remove(filepath.Join(d0, IndexFile))
	d1 := s.dayDir("jp", base.AddDate(0, 0, -2))
	os.WriteFile(filepath.Join(d1, IndexFile), []byte("junk\n"), 0o640)

	var progress []int
	res, err := s.Reindex(context.Background(), ReindexOptions{Progress: func(done, total int) { progress = append(progress, done) }, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	rel := func(d string) string { r, _ := filepath.Rel(s.root, filepath.Join(d, IndexFile)); return r }
	if res.Records != len(recs) || res.Days == 0 || len(progress) != res.Days ||
		!slices.Contains(res.Changed, rel(d0)) || !slices.Contains(res.Changed, rel(d1)) {
		t.Fatalf("first run: %+v, progress %v", res, progress)
	}
	// Every day's index is sorted by start and matches its record files.
	for _, tn := range []string{"a", "jp"} {
		days, _ := s.listDays(tn, date{}, date{})
		for _, d := range days {
			lines := readLines(t, d.index())
			if !slices.IsSortedFunc(lines, func(a, b Entry) int { return int(a.startMS - b.startMS) }) {
				t.Fatalf("%s not sorted", d.index())
			}
		}
	}
	got := listAll(t, s, Query{Limit: 1000}, nil)
	if len(got) != len(recs) {
		t.Fatalf("listing after reindex: %d", len(got))
	}
	again, err := s.Reindex(context.Background(), ReindexOptions{})
	if err != nil || len(again.Changed) != 0 || again.Records != len(recs) {
		t.Fatalf("second run: %+v %v", again, err)
	}
}

func TestReindexSelectsTenantAndDates(t *testing.T) {
	s := newTestStore(t, nil, nil)
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	seed(t, s, []string{"a", "b"}, 10, 20, base)
	for _, tn := range []string{"a", "b"} {
		days, _ := s.listDays(tn, date{}, date{})
		for _, d := range days {
			os.Remove(d.index())
		}
	}
	from, to := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 17, 0, 0, 0, 0, time.UTC)
	res, err := s.Reindex(context.Background(), ReindexOptions{Tenant: "b", From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"b/cdr/2026/11/15/index.jsonl", "b/cdr/2026/11/16/index.jsonl", "b/cdr/2026/11/17/index.jsonl"}
	if !slices.Equal(res.Changed, want) {
		t.Fatalf("changed %v, want %v", res.Changed, want)
	}
	if _, err := os.Stat(filepath.Join(s.root, "a", "cdr", "2026", "11", "16", IndexFile)); !os.IsNotExist(err) {
		t.Fatal("tenant a reindexed")
	}
	if _, err := s.Reindex(context.Background(), ReindexOptions{Tenant: "../x"}); err == nil {
		t.Fatal("bad tenant accepted")
	}
}

func TestReindexReportsUnreadable(t *testing.T) {
	s := newTestStore(t, nil, nil)
	r := call("a", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), false, "1", "2")
	commit(t, s, r)
	bad := NewID(r.Start)
	os.WriteFile(filepath.Join(s.dayDir("a", r.Start), string(bad)+".json"), []byte("{not json"), 0o640)
	res, err := s.Reindex(context.Background(), ReindexOptions{})
	if err != nil || res.Records != 1 || len(res.Unreadable) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}
