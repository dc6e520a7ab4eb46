package cdr

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return l
}

// newTestStore opens a store over a fresh directory with every tenant in
// UTC unless zones says otherwise.
func newTestStore(t testing.TB, zones map[string]*time.Location, mod func(*Options)) *Store {
	t.Helper()
	opts := Options{
		DataDir: t.TempDir(),
		Location: func(tenant string) *time.Location {
			if l := zones[tenant]; l != nil {
				return l
			}
			return time.UTC
		},
	}
	if mod != nil {
		mod(&opts)
	}
	s, err := New(opts, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	// The committer goes on after a commit's done (it restocks the spare
	// files): it must be over before the temporary directory is removed
	// (cleanups run last registered first, TempDir's after this one).
	t.Cleanup(s.Flush)
	return s
}

// call builds a finished record.
func call(tenant string, start time.Time, answered bool, from, to string) *Record {
	r := NewRecord(tenant, calls.DirectionInbound, start)
	r.From, r.To, r.DID, r.Trunk, r.Extension = from, to, to, "carrier", "100"
	r.CallID = "a84b4c76e66710@pc33.example.com"
	end := start.Add(90 * time.Second)
	if answered {
		r.SetAnswer(start.Add(10*time.Second), "100")
		r.Finish(end, calls.CauseAnswered, 200, "")
	} else {
		r.Finish(end, calls.CauseNoAnswer, 487, "no answer")
	}
	return r
}

func commit(t testing.TB, s *Store, r *Record) {
	t.Helper()
	if err := s.Commit(r); err != nil {
		t.Fatalf("commit %s: %v", r.ID, err)
	}
}

// tree lists every file under dir with its size, for before/after checks.
func tree(t testing.TB, dir string) string {
	t.Helper()
	var lines []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			lines = append(lines, rel+"/")
		} else {
			data, _ := os.ReadFile(p)
			lines = append(lines, fmt.Sprintf("%s %d %x", rel, fi.Size(), data))
		}
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func readLines(t testing.TB, path string) []Entry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read index: %v", err)
	}
	var out []Entry
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		e, err := ParseLine([]byte(l))
		if err != nil {
			t.Fatalf("index line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// markersIn counts the files of an in-flight directory other than spares
// (spare.go): markers and temporary files (not the stock directories).
func markersIn(t *testing.T, dir string) int {
	t.Helper()
	es, _ := os.ReadDir(dir)
	n := 0
	for _, e := range es {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), spareName) {
			n++
		}
	}
	return n
}
