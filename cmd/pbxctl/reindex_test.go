package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/datadir"
	"pbx/sipcore/calls"
)

// seedRecords commits n calls for tenant acme, one a day back from
// 2026-11-21 (host time zone, as resolveDataDir uses), and returns the store
// and the index paths.
func seedRecords(t *testing.T, n int) (string, *cdr.Store, []string) {
	t.Helper()
	dir := t.TempDir()
	s, err := cdr.New(cdr.Options{DataDir: dir, Location: func(string) *time.Location { return time.Local }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var idx []string
	for i := range n {
		start := time.Date(2026, 11, 21-i, 12, 0, 0, 0, time.Local)
		r := cdr.NewRecord("acme", calls.DirectionInbound, start)
		r.From, r.To = "+15551230001", "+15559870002"
		r.Finish(start.Add(time.Minute), calls.CauseNoAnswer, 487, "")
		if err := s.Commit(r); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, filepath.Join(filepath.Dir(s.RecordPath("acme", r.ID, r.Start)), cdr.IndexFile))
	}
	return dir, s, idx
}

func execute(t *testing.T, which string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newReindexCmd()
	if which == "repair" {
		cmd = newRepairCmd()
	}
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestReindexCommand(t *testing.T) {
	dir, s, idx := seedRecords(t, 3)
	os.Remove(idx[1])
	out, stderr, err := execute(t, "reindex", "--data-dir", dir)
	if err != nil {
		t.Fatalf("reindex: %v\n%s", err, out)
	}
	rel, _ := filepath.Rel(dir, idx[1])
	if !strings.Contains(out, "rewrote "+rel) || !strings.Contains(out, "3 days, 3 records") {
		t.Fatalf("output:\n%s", out)
	}
	if stderr != "" {
		t.Fatalf("progress printed while not on a terminal: %q", stderr)
	}
	if _, err := os.Stat(idx[1]); err != nil {
		t.Fatalf("index not rebuilt: %v", err)
	}
	p, err := s.List(context.Background(), cdr.Query{})
	if err != nil || len(p.Records) != 3 {
		t.Fatalf("listing after reindex: %d %v", len(p.Records), err)
	}
	out, _, err = execute(t, "reindex", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "nothing changed") || strings.Contains(out, "rewrote") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
}

func TestReindexCommandSelection(t *testing.T) {
	dir, _, idx := seedRecords(t, 3)
	for _, p := range idx {
		os.Remove(p)
	}
	out, _, err := execute(t, "reindex", "--data-dir", dir, "--tenant", "acme", "--from", "2026-11-20", "--to", "2026-11-20")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "1 days, 1 records") {
		t.Fatalf("output:\n%s", out)
	}
	if _, err := os.Stat(idx[1]); err != nil {
		t.Fatal("selected day not rebuilt")
	}
	if _, err := os.Stat(idx[0]); err == nil {
		t.Fatal("day outside the range rebuilt")
	}
}

func TestReindexCommandUsage(t *testing.T) {
	dir, _, _ := seedRecords(t, 1)
	for _, args := range [][]string{
		{},
		{"--data-dir", dir, "--from", "21/11/2026"},
		{"--data-dir", dir, "--to", "2026-13-01"},
		{"--data-dir", dir, "--from", "2026-11-21", "--to", "2026-11-20"},
		{"--data-dir", dir, "--tenant", "../etc"},
		{"--data-dir", filepath.Join(dir, "absent")},
	} {
		_, _, err := execute(t, "reindex", args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func TestCommandsRefuseWhileDaemonRuns(t *testing.T) {
	dir, _, idx := seedRecords(t, 1)
	os.Remove(idx[0])
	held, err := datadir.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	for _, which := range []string{"reindex", "repair"} {
		_, _, err := execute(t, which, "--data-dir", dir)
		if !errors.Is(err, datadir.ErrLocked) || !strings.Contains(err.Error(), "daemon is running") {
			t.Fatalf("%s while locked: %v", which, err)
		}
		var ue usageError
		if errors.As(err, &ue) {
			t.Fatalf("%s: lock refusal is not a usage error (exit 1, not 2)", which)
		}
	}
	if _, err := os.Stat(idx[0]); err == nil {
		t.Fatal("reindex wrote while the lock was held")
	}
}
