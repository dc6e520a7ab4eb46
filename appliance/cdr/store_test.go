package cdr

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

func TestCommitAnsweredCall(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 12, 30, 0, time.UTC)
	r := call("acme", start, true, "+15551230001", "+15559870002")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(s.root, "acme", "cdr", "inflight", string(r.ID)+".json")
	got, err := readRecord(marker)
	if err != nil || got.ID != r.ID {
		t.Fatalf("marker: %v %+v", err, got)
	}
	inflight := *r
	inflight.End, inflight.Cause = time.Time{}, ""
	if err := s.Answered(&inflight); err != nil {
		t.Fatal(err)
	}
	if got, _ := readRecord(marker); got.DurationMS != 0 || got.BillMS != 0 || got.Answer == nil {
		t.Fatalf("in-flight marker: duration %d bill %d answer %v", got.DurationMS, got.BillMS, got.Answer)
	}
	r.Legs = append(r.Legs, Leg{Target: "transfer"}) // a rewrite, e.g. after a transfer
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	if got, _ := readRecord(marker); len(got.Legs) != 1 {
		t.Fatalf("marker not rewritten: %+v", got.Legs)
	}
	commit(t, s, r)
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker still there: %v", err)
	}
	day := filepath.Join(s.root, "acme", "cdr", "2026", "11", "21")
	ents, _ := os.ReadDir(day)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != string(r.ID)+".json,index.jsonl" {
		t.Fatalf("day directory holds %v", names)
	}
	rec, err := s.Get(context.Background(), "acme", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Cause != calls.CauseAnswered || rec.BillMS != 80000 || rec.DurationMS != 90000 || rec.Answer == nil || rec.V != 1 {
		t.Fatalf("record: %+v", rec)
	}
	lines := readLines(t, filepath.Join(day, IndexFile))
	if len(lines) != 1 || lines[0].ID != r.ID || !lines[0].Answered || lines[0].DurationMS != 90000 || lines[0].Cause != calls.CauseAnswered {
		t.Fatalf("index: %+v", lines)
	}
	// An index line is compact and has exactly the listing fields.
	raw, _ := os.ReadFile(filepath.Join(day, IndexFile))
	var m map[string]any
	json.Unmarshal(raw, &m)
	if len(m) != 13 || m["rec"] != false || m["vm"] != false || m["did"] != "+15559870002" {
		t.Fatalf("index line fields: %s", raw)
	}
	if err := s.Commit(r); !errors.Is(err, ErrCommitted) {
		t.Fatalf("second commit: %v", err)
	}
	if n := len(readLines(t, filepath.Join(day, IndexFile))); n != 1 {
		t.Fatalf("second commit added a line: %d", n)
	}
}

func TestCommitUnansweredWritesNoMarker(t *testing.T) {
	s := newTestStore(t, nil, nil)
	r := call("acme", time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC), false, "100", "200")
	commit(t, s, r)
	if _, err := os.Stat(s.inflightDir("acme")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("inflight directory exists for an unanswered call: %v", err)
	}
	rec, err := s.Get(context.Background(), "acme", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Answer != nil || rec.BillMS != 0 || rec.Cause != calls.CauseNoAnswer {
		t.Fatalf("record: %+v", rec)
	}
}

func TestCommitRefusesUnsafeNames(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	r := call("../etc", start, false, "1", "2")
	if err := s.Commit(r); !errors.Is(err, ErrTenant) {
		t.Fatalf("tenant ../etc: %v", err)
	}
	r = call("acme", start, false, "1", "2")
	r.ID = "../../x"
	if err := s.Commit(r); !errors.Is(err, ErrID) {
		t.Fatalf("id ../../x: %v", err)
	}
	if err := s.Answered(r); !errors.Is(err, ErrID) {
		t.Fatalf("marker id ../../x: %v", err)
	}
	// The SIP Call-ID is a field only, whatever it holds.
	r = call("acme", start, false, "1", "2")
	r.CallID = "../../../../tmp/x"
	commit(t, s, r)
	if _, err := os.Stat(filepath.Join(s.root, "..", "tmp", "x")); err == nil {
		t.Fatal("call id used as a path")
	}
}

// TestDayDirectoryDST commits calls at 01:30 on the fall-back day in
// America/New_York: 01:30 happens twice (EDT, then EST); both are on
// 2026-11-01 local, although the second is 06:30 UTC and a call at 23:30
// local on the day before is already 2026-11-01 in UTC.
func TestDayDirectoryDST(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	s := newTestStore(t, map[string]*time.Location{"acme": ny}, nil)
	first := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)  // 01:30 EDT
	second := time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC) // 01:30 EST
	eve := time.Date(2026, 11, 1, 3, 30, 0, 0, time.UTC)    // 23:30 EDT on 31 October
	if first.In(ny).Hour() != 1 || second.In(ny).Hour() != 1 {
		t.Fatalf("test times are not 01:30 local: %v %v", first.In(ny), second.In(ny))
	}
	for _, tc := range []struct {
		start time.Time
		day   string
	}{{first, "2026/11/01"}, {second, "2026/11/01"}, {eve, "2026/10/31"}} {
		r := call("acme", tc.start, true, "1", "2")
		commit(t, s, r)
		want := filepath.Join(s.root, "acme", "cdr", filepath.FromSlash(tc.day), string(r.ID)+".json")
		if _, err := os.Stat(want); err != nil {
			t.Errorf("start %v: not in %s: %v", tc.start, tc.day, err)
		}
		if got, err := s.Get(context.Background(), "acme", r.ID); err != nil || got.ID != r.ID {
			t.Errorf("Get %s: %v", r.ID, err)
		}
	}
	if n := len(readLines(t, filepath.Join(s.root, "acme", "cdr", "2026", "11", "01", IndexFile))); n != 2 {
		t.Fatalf("fall-back day index has %d lines, want 2", n)
	}
}

// TestDayDirectoryTenantZone: the host runs in one zone (UTC here, as the
// Location func says for other tenants), a tenant in Tokyo gets its local
// date.
func TestDayDirectoryTenantZone(t *testing.T) {
	tokyo := mustLoc(t, "Asia/Tokyo")
	s := newTestStore(t, map[string]*time.Location{"jp": tokyo}, nil)
	start := time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC) // 05:00 on 22 Nov in Tokyo
	a, b := call("jp", start, false, "1", "2"), call("us", start, false, "1", "2")
	commit(t, s, a)
	commit(t, s, b)
	for _, p := range []string{
		filepath.Join(s.root, "jp", "cdr", "2026", "11", "22", string(a.ID)+".json"),
		filepath.Join(s.root, "us", "cdr", "2026", "11", "21", string(b.ID)+".json"),
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("missing %s", p)
		}
	}
	// Get finds a record even after the tenant's zone changed.
	s.opts.Location = func(string) *time.Location { return time.UTC }
	if _, err := s.Get(context.Background(), "jp", a.ID); err != nil {
		t.Fatalf("Get after zone change: %v", err)
	}
	if _, err := s.Get(context.Background(), "jp", NewID(start)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get unknown id: %v", err)
	}
	if _, err := s.Get(context.Background(), "jp", "../../etc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get bad id: %v", err)
	}
}

func TestConcurrentCommitsDoNotInterleave(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC)
	const workers, per = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*per)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r := call("acme", start.Add(time.Duration(w*per+i)*time.Second), i%2 == 0,
					strings.Repeat("9", 200), "+1555000"+string(rune('0'+w)))
				if err := s.Commit(r); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lines := readLines(t, filepath.Join(s.root, "acme", "cdr", "2026", "05", "05", IndexFile))
	if len(lines) != workers*per {
		t.Fatalf("%d index lines, want %d", len(lines), workers*per)
	}
	ids := map[ID]bool{}
	for _, e := range lines {
		ids[e.ID] = true
	}
	if len(ids) != workers*per {
		t.Fatalf("%d distinct ids", len(ids))
	}
}

func TestAppendAfterTornLineKeepsNewLineWhole(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC)
	commit(t, s, call("acme", start, false, "1", "2"))
	idx := filepath.Join(s.root, "acme", "cdr", "2026", "05", "05", IndexFile)
	f, _ := os.OpenFile(idx, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"id":"2026050`)
	f.Close()
	r := call("acme", start.Add(time.Second), false, "1", "2")
	commit(t, s, r)
	p, err := s.List(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 2 || p.Records[0].ID != r.ID {
		t.Fatalf("listing after a torn line: %+v", p.Records)
	}
}

// TestMarkerAndRecordPaths: the paths built by concatenation on the
// call's path are those filepath.Join gives, for every tenant asked (the
// in-flight directory is kept per tenant); an id that is not valid is
// still cleaned by Join.
func TestMarkerAndRecordPaths(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	for _, tenant := range []string{"acme", "globex", "acme"} {
		id := NewID(start)
		if got, want := s.MarkerPath(tenant, id), filepath.Join(s.root, tenant, cdrDir, inflightDir, string(id)+recordExt); got != want {
			t.Errorf("marker path %q, want %q", got, want)
		}
		if got, want := s.RecordPath(tenant, id, start), filepath.Join(s.root, tenant, cdrDir, "2026", "11", "21", string(id)+recordExt); got != want {
			t.Errorf("record path %q, want %q", got, want)
		}
	}
	if got, want := s.MarkerPath("acme", "../x"), filepath.Join(s.root, "acme", cdrDir, "x"+recordExt); got != want {
		t.Errorf("marker path of an invalid id %q, want %q", got, want)
	}
}

// TestRelUnder checks relUnder against filepath.Rel for paths under the
// root, the root itself, beside it and for the root directory.
func TestRelUnder(t *testing.T) {
	for _, tc := range []struct{ root, p string }{
		{"/data", "/data/acme/cdr/2026/11/21/20261121T151230.123Z-k3j9q2ab.json"},
		{"/data", "/data/a"},
		{"/data", "/data"},
		{"/data", "/database/a"},
		{"/data", "/other/a"},
		{"/", "/data/a"},
		{"/a/b", "/a/b/c/d"},
	} {
		want, werr := filepath.Rel(tc.root, tc.p)
		got, err := relUnder(tc.root, tc.p)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("relUnder(%q, %q) = %q, %v; filepath.Rel: %q, %v", tc.root, tc.p, got, err, want, werr)
		}
	}
}

// TestInflightDirOfEachTenant checks the in-flight directory kept at
// hand for the last tenant against the joined path, tenants alternating.
func TestInflightDirOfEachTenant(t *testing.T) {
	s := newTestStore(t, nil, nil)
	for _, tenant := range []string{"acme", "acme", "globex", "acme", "globex", "globex", "initech", "acme"} {
		if got, want := s.inflightDir(tenant), filepath.Join(s.root, tenant, "cdr", "inflight"); got != want {
			t.Fatalf("inflightDir(%s) = %s, want %s", tenant, got, want)
		}
	}
}
