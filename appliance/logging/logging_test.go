package logging

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// pointJournalAt sets JOURNAL_STREAM to f's own device and inode, as systemd does
// for the stream it connects to the service's stderr.
func pointJournalAt(t *testing.T, f *os.File) {
	t.Helper()
	dev, ino, ok := devIno(f)
	if !ok {
		t.Fatal("no device and inode for the test file")
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", dev, ino))
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readLines(t *testing.T, f *os.File) []string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestDetect(t *testing.T) {
	journal := tempFile(t)
	other := tempFile(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	tests := []struct {
		name   string
		stream *os.File // JOURNAL_STREAM points here; nil leaves it unset
		w      io.Writer
		want   Format
	}{
		{"journal stream", journal, journal, Journal},
		{"another file", journal, other, Text},
		{"pipe, no journal", nil, w, Text},
		{"pipe is the stream", w, w, Journal},
		{"not a file", journal, &strings.Builder{}, Text},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("JOURNAL_STREAM", "")
			if tt.stream != nil {
				pointJournalAt(t, tt.stream)
			}
			if got := Detect(tt.w); got != tt.want {
				t.Fatalf("Detect = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("malformed JOURNAL_STREAM", func(t *testing.T) {
		for _, v := range []string{"12", "a:b", ":", "1:2:3"} {
			t.Setenv("JOURNAL_STREAM", v)
			if got := Detect(journal); got != Text {
				t.Fatalf("JOURNAL_STREAM=%q: Detect = %v, want text", v, got)
			}
		}
	})
}

func TestUnderJournal(t *testing.T) {
	f := tempFile(t)
	saved := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = saved }()

	t.Setenv("JOURNAL_STREAM", "")
	if UnderJournal() {
		t.Fatal("UnderJournal() = true without JOURNAL_STREAM")
	}
	pointJournalAt(t, f)
	if !UnderJournal() {
		t.Fatal("UnderJournal() = false with JOURNAL_STREAM naming stderr")
	}
}

func TestJournalPriorities(t *testing.T) {
	f := tempFile(t)
	pointJournalAt(t, f)
	log := New(f, slog.LevelDebug-4)
	log.Debug("debug")
	log.Log(t.Context(), slog.LevelDebug-4, "trace")
	log.Info("info", "note", `"level":"ERROR"`)
	log.Log(t.Context(), slog.LevelInfo+2, "notice")
	log.Warn("warn")
	log.With("tenant", "acme").WithGroup("call").Error("error", "id", "c1")
	log.Log(t.Context(), slog.LevelError+4, "critical")

	want := []struct{ prefix, msg string }{
		{"<7>", "debug"},
		{"<7>", "trace"},
		{"<6>", "info"},
		{"<5>", "notice"},
		{"<4>", "warn"},
		{"<3>", "error"},
		{"<3>", "critical"},
	}
	lines := readLines(t, f)
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		line := lines[i]
		if !strings.HasPrefix(line, w.prefix+"{") {
			t.Errorf("line %d: %q, want prefix %s{", i, line, w.prefix)
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line[3:]), &rec); err != nil {
			t.Errorf("line %d is not JSON after the prefix: %v", i, err)
			continue
		}
		if rec["msg"] != w.msg {
			t.Errorf("line %d: msg %v, want %s", i, rec["msg"], w.msg)
		}
		if _, ok := rec["time"]; ok {
			t.Errorf("line %d carries a time the journal already records", i)
		}
	}
	if !strings.Contains(lines[5], `"tenant":"acme","call":{"id":"c1"}`) {
		t.Errorf("attributes and groups lost: %s", lines[5])
	}
}

func TestLevelFilter(t *testing.T) {
	f := tempFile(t)
	pointJournalAt(t, f)
	log := New(f, slog.LevelWarn)
	log.Info("hidden")
	log.Warn("shown")
	lines := readLines(t, f)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "<4>") {
		t.Fatalf("got %q, want only the warning", lines)
	}
}

func TestTextOnPipe(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log := New(w, slog.LevelInfo)
	log.Error("disk full", "err", "no space")
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(line, "<") || !strings.Contains(line, `level=ERROR msg="disk full" err="no space"`) {
		t.Fatalf("got %q, want a text record without priority", line)
	}
}

// TestConcurrentRecords checks that records written at once by many goroutines
// each keep their own priority and never interleave.
func TestConcurrentRecords(t *testing.T) {
	f := tempFile(t)
	log := NewFormat(f, slog.LevelDebug, Journal)
	const perLevel = 200
	levels := map[slog.Level]string{
		slog.LevelDebug: "<7>", slog.LevelInfo: "<6>", slog.LevelWarn: "<4>", slog.LevelError: "<3>",
	}
	var wg sync.WaitGroup
	for level := range levels {
		wg.Go(func() {
			for i := range perLevel {
				log.Log(t.Context(), level, "m", "level_name", level.String(), "i", i)
			}
		})
	}
	wg.Wait()
	lines := readLines(t, f)
	if len(lines) != perLevel*len(levels) {
		t.Fatalf("got %d lines, want %d", len(lines), perLevel*len(levels))
	}
	for _, line := range lines {
		var rec struct {
			Name string `json:"level_name"`
		}
		if err := json.Unmarshal([]byte(line[3:]), &rec); err != nil {
			t.Fatalf("interleaved or broken line %q: %v", line, err)
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(rec.Name)); err != nil {
			t.Fatal(err)
		}
		if line[:3] != levels[level] {
			t.Fatalf("line %q has prefix %s, want %s", line, line[:3], levels[level])
		}
	}
}

func TestPlainJSON(t *testing.T) {
	f := tempFile(t)
	pointJournalAt(t, f)
	NewFormat(f, slog.LevelInfo, JSON).Error("boom")
	lines := readLines(t, f)
	var rec map[string]any
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil {
		t.Fatalf("got %q, want one bare JSON line", lines)
	}
	if rec["level"] != "ERROR" || rec["time"] == nil {
		t.Fatalf("got %v, want level ERROR and a time", rec)
	}
}
