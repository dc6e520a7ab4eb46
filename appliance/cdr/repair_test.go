package cdr

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

func kinds(acts []Action) []string {
	var out []string
	for _, a := range acts {
		out = append(out, string(a.Kind))
	}
	slices.Sort(out)
	return out
}

func TestRecoverPromotesMarkerWithoutRecord(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	r := call("acme", start, true, "+15551230001", "+15559870002")
	r.End, r.Cause = time.Time{}, "" // in flight: no end yet
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	killed := start.Add(7*time.Minute + 250*time.Millisecond)
	if err := os.Chtimes(s.MarkerPath("acme", r.ID), killed, killed); err != nil {
		t.Fatal(err)
	}
	before := tree(t, s.root)
	dry, err := s.Repair(context.Background(), RepairOptions{DryRun: true})
	if err != nil || !slices.Equal(kinds(dry), []string{"promoted"}) {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if tree(t, s.root) != before {
		t.Fatal("dry run changed files")
	}
	acts, err := s.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(acts); !slices.Equal(got, []string{"promoted"}) {
		t.Fatalf("actions %v", acts)
	}
	rec, err := s.Get(context.Background(), "acme", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Incomplete || rec.Cause != calls.CauseIncomplete || !rec.End.Equal(killed) || rec.Answer == nil ||
		rec.DurationMS != (7*time.Minute+250*time.Millisecond).Milliseconds() || rec.BillMS != rec.DurationMS-10000 {
		t.Fatalf("promoted record: %+v", rec)
	}
	if _, err := os.Stat(s.MarkerPath("acme", r.ID)); !os.IsNotExist(err) {
		t.Fatalf("marker left: %v", err)
	}
	if es, _ := os.ReadDir(s.inflightDir("acme")); len(es) != 0 {
		t.Fatalf("recovery left %v in the in-flight directory (a spare of the promoted marker?)", es)
	}
	lines := readLines(t, filepath.Join(s.dayDir("acme", start), IndexFile))
	if len(lines) != 1 || lines[0].Cause != calls.CauseIncomplete || !lines[0].Answered {
		t.Fatalf("index: %+v", lines)
	}
	again, err := s.Recover(context.Background())
	if err != nil || len(again) != 0 {
		t.Fatalf("second recovery: %v %v", again, err)
	}
}

func TestRecoverDropsMarkerOfCommittedRecord(t *testing.T) {
	for _, lineMissing := range []bool{false, true} {
		t.Run(map[bool]string{false: "line present", true: "line missing"}[lineMissing], func(t *testing.T) {
			s := newTestStore(t, nil, nil)
			start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
			other := call("acme", start.Add(-time.Hour), false, "1", "2")
			commit(t, s, other)
			r := call("acme", start, true, "1", "2")
			if err := s.Answered(r); err != nil {
				t.Fatal(err)
			}
			marker, _ := os.ReadFile(s.MarkerPath("acme", r.ID))
			commit(t, s, r)
			// The crash: the marker is still there.
			os.WriteFile(s.MarkerPath("acme", r.ID), marker, 0o640)
			idx := filepath.Join(s.dayDir("acme", start), IndexFile)
			if lineMissing {
				data, _ := os.ReadFile(idx)
				keep := strings.SplitAfter(string(data), "\n")[0]
				os.WriteFile(idx, []byte(keep), 0o640)
			}
			acts, err := s.Recover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"marker_dropped"}
			if lineMissing {
				want = []string{"index_line_added", "marker_dropped"}
			}
			if got := kinds(acts); !slices.Equal(got, want) {
				t.Fatalf("actions %v, want %v", acts, want)
			}
			rec, _ := s.Get(context.Background(), "acme", r.ID)
			if rec.Incomplete || rec.Cause != calls.CauseAnswered {
				t.Fatalf("committed record changed: %+v", rec)
			}
			lines := readLines(t, idx)
			if len(lines) != 2 || lines[1].ID != r.ID {
				t.Fatalf("index: %+v", lines)
			}
		})
	}
}

func TestRecoverTornIndexLine(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	a, b := call("acme", start, false, "1", "2"), call("acme", start.Add(time.Minute), false, "1", "2")
	commit(t, s, a)
	commit(t, s, b)
	idx := filepath.Join(s.dayDir("acme", start), IndexFile)
	data, _ := os.ReadFile(idx)
	torn := data[:len(data)-20] // crash in the middle of b's line
	os.WriteFile(idx, torn, 0o640)
	// Listing never shows the torn line.
	p, err := s.List(context.Background(), Query{})
	if err != nil || len(p.Records) != 1 || p.Records[0].ID != a.ID {
		t.Fatalf("listing of torn index: %+v %v", p.Records, err)
	}
	acts, err := s.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(acts); !slices.Equal(got, []string{"index_line_added", "index_truncated"}) {
		t.Fatalf("actions %v", acts)
	}
	after, _ := os.ReadFile(idx)
	if string(after) != string(data) {
		t.Fatalf("index after repair\n%s\nwant\n%s", after, data)
	}
	p, err = s.List(context.Background(), Query{})
	if err != nil || len(p.Records) != 2 {
		t.Fatalf("listing after repair: %+v %v", p.Records, err)
	}
	if again, _ := s.Recover(context.Background()); len(again) != 0 {
		t.Fatalf("second recovery: %v", again)
	}
}

func TestRecoverTornLineOfLostRecord(t *testing.T) {
	// The fragment names a record that does not exist: it is cut and
	// nothing is added.
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	a := call("acme", start, false, "1", "2")
	commit(t, s, a)
	idx := filepath.Join(s.dayDir("acme", start), IndexFile)
	data, _ := os.ReadFile(idx)
	os.WriteFile(idx, append(slices.Clone(data), `{"id":"20261121T150100.000Z-zzzz`...), 0o640)
	acts, err := s.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(acts); !slices.Equal(got, []string{"index_truncated"}) {
		t.Fatalf("actions %v", acts)
	}
	if after, _ := os.ReadFile(idx); string(after) != string(data) {
		t.Fatalf("index after repair: %s", after)
	}
}

func TestRepairStrayTmpFiles(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	day := s.dayDir("acme", start)
	done := call("acme", start, false, "1", "2")
	commit(t, s, done)
	// 1. a complete record whose rename did not happen
	whole := call("acme", start.Add(time.Minute), false, "1", "2")
	n := whole.normalize()
	data := mustJSON(t, &n)
	os.WriteFile(filepath.Join(day, string(whole.ID)+".json.tmp"), data, 0o640)
	// 2. a torn write
	torn := call("acme", start.Add(2*time.Minute), false, "1", "2")
	os.WriteFile(filepath.Join(day, string(torn.ID)+".json.tmp"), data[:len(data)/2], 0o640)
	// 3. a tmp of a record already committed
	os.WriteFile(filepath.Join(day, string(done.ID)+".json.tmp"), []byte("{}"), 0o640)
	// 4. an interrupted index rewrite
	os.WriteFile(filepath.Join(day, IndexFile+".tmp"), []byte("x"), 0o640)
	// 5. an interrupted marker write
	os.MkdirAll(s.inflightDir("acme"), 0o750)
	os.WriteFile(filepath.Join(s.inflightDir("acme"), string(torn.ID)+".json.tmp"), []byte("{"), 0o640)

	before := tree(t, s.root)
	dry, err := s.Repair(context.Background(), RepairOptions{Full: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if tree(t, s.root) != before {
		t.Fatal("dry run changed files")
	}
	acts, err := s.Repair(context.Background(), RepairOptions{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"index_line_added", "tmp_committed", "tmp_removed", "tmp_removed", "tmp_removed", "tmp_removed"}
	if got := kinds(acts); !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", acts, want)
	}
	if !slices.Equal(kinds(dry), kinds(acts)) {
		t.Fatalf("dry run reported %v, run did %v", dry, acts)
	}
	ents, _ := os.ReadDir(day)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	wantNames := []string{string(done.ID) + ".json", string(whole.ID) + ".json", IndexFile}
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("day directory %v, want %v", names, wantNames)
	}
	if rest, _ := os.ReadDir(s.inflightDir("acme")); len(rest) != 0 {
		t.Fatalf("inflight left %v", rest)
	}
	if lines := readLines(t, filepath.Join(day, IndexFile)); len(lines) != 2 {
		t.Fatalf("index %+v", lines)
	}
	if again, _ := s.Repair(context.Background(), RepairOptions{Full: true}); len(again) != 0 {
		t.Fatalf("second repair: %v", again)
	}
}

func TestRepairRewritesDamagedIndex(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	a, b := call("acme", start, false, "1", "2"), call("acme", start.Add(time.Minute), false, "1", "2")
	commit(t, s, a)
	commit(t, s, b)
	idx := filepath.Join(s.dayDir("acme", start), IndexFile)
	data, _ := os.ReadFile(idx)
	lines := strings.SplitAfter(string(data), "\n")
	ghost := call("acme", start.Add(2*time.Minute), false, "1", "2").normalize()
	g := ghost.Entry()
	// garbage line, a duplicate of a, a line without record; b missing.
	os.WriteFile(idx, []byte("garbage\n"+lines[0]+lines[0]+string(g.AppendLine(nil))), 0o640)
	acts, err := s.Repair(context.Background(), RepairOptions{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 1 || acts[0].Kind != ActIndexRewritten || !strings.Contains(acts[0].Detail, "1 damaged, 1 duplicate, 1 without record, 1 missing") {
		t.Fatalf("actions %v", acts)
	}
	if after, _ := os.ReadFile(idx); string(after) != string(data) {
		t.Fatalf("rewritten index\n%s\nwant\n%s", after, data)
	}
}

func TestRecoverLooksOnlyAtRecentDays(t *testing.T) {
	s := newTestStore(t, nil, func(o *Options) { o.RecentDays = 2 })
	start := time.Date(2026, 11, 1, 15, 0, 0, 0, time.UTC)
	var old *Record
	for d := range 5 {
		r := call("acme", start.AddDate(0, 0, d), false, "1", "2")
		commit(t, s, r)
		if d == 0 {
			old = r
		}
	}
	os.Remove(filepath.Join(s.dayDir("acme", old.Start), IndexFile))
	if acts, _ := s.Recover(context.Background()); len(acts) != 0 {
		t.Fatalf("startup recovery looked at an old day: %v", acts)
	}
	acts, _ := s.Repair(context.Background(), RepairOptions{Full: true})
	if got := kinds(acts); !slices.Equal(got, []string{"index_line_added"}) {
		t.Fatalf("full repair: %v", acts)
	}
}
