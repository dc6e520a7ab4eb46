package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/sipcore/calls"
)

func TestRepairCommand(t *testing.T) {
	dir, s, idx := seedRecords(t, 2)
	// A call killed while answered, and a torn index line.
	start := time.Date(2026, 11, 21, 13, 0, 0, 0, time.Local)
	r := cdr.NewRecord("acme", calls.DirectionOutbound, start)
	r.SetAnswer(start.Add(5*time.Second), "")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(idx[1])
	os.WriteFile(idx[1], data[:len(data)-10], 0o640)
	tmp := filepath.Join(filepath.Dir(idx[0]), "index.jsonl.tmp")
	os.WriteFile(tmp, []byte("partial"), 0o640)

	out, _, err := execute(t, "repair", "--data-dir", dir, "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dry run: promoted: acme/cdr/2026/11/21/" + string(r.ID) + ".json",
		"dry run: index_truncated", "dry run: index_line_added", "dry run: tmp_removed", "nothing changed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(s.MarkerPath("acme", r.ID)); err != nil {
		t.Fatal("dry run removed the marker")
	}

	out, _, err = execute(t, "repair", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "promoted: ") || !strings.Contains(out, "4 changes made") || strings.Contains(out, "dry run") {
		t.Fatalf("output:\n%s", out)
	}
	rec, err := s.Get(context.Background(), "acme", r.ID)
	if err != nil || !rec.Incomplete || rec.Cause != calls.CauseIncomplete {
		t.Fatalf("promoted record: %+v %v", rec, err)
	}
	if after, _ := os.ReadFile(idx[1]); string(after) != string(data) {
		t.Fatalf("index not repaired:\n%s", after)
	}

	out, _, err = execute(t, "repair", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "nothing to repair, nothing changed") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
}
