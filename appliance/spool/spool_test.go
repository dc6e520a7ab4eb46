package spool

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type job struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestSpoolLifecycle: written jobs load again; a temporary file is
// removed, a file that is not a job and one whose id names another file are
// quarantined as they are; Remove and Fail leave each job in at most one
// directory.
func TestSpoolLifecycle(t *testing.T) {
	root := t.TempDir()
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "b", "c"} {
		if err := s.Write(id, job{ID: id, N: i}); err != nil {
			t.Fatal(err)
		}
	}
	pending := filepath.Join(root, "pending")
	_ = os.WriteFile(filepath.Join(pending, ".a.json.123.tmp"), []byte("{"), 0o600)
	_ = os.WriteFile(filepath.Join(pending, "torn.json"), []byte(`{"id": "to`), 0o600)
	_ = os.WriteFile(filepath.Join(pending, "elsewhere.json"), []byte(`{"id": "b"}`), 0o600)

	var got []string
	bad, err := s.Load(func(file string, b []byte) error {
		var j job
		if err := json.Unmarshal(b, &j); err != nil {
			return err
		}
		if FileOf(j.ID) != file {
			return errors.New("wrong file")
		}
		got = append(got, j.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("loaded %v", got)
	}
	if len(bad) != 2 || bad[0].Moved != nil || bad[1].Moved != nil {
		t.Errorf("bad %+v", bad)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "failed", "torn.json")); string(b) != `{"id": "to` {
		t.Errorf("quarantined file changed: %q", b)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("a"); err != nil {
		t.Errorf("removing a gone job: %v", err)
	}
	if err := s.Fail("b"); err != nil {
		t.Fatal(err)
	}
	if n := names(t, pending); !slices.Equal(n, []string{"c.json"}) {
		t.Errorf("pending holds %v", n)
	}
	if n := names(t, filepath.Join(root, "failed")); !slices.Equal(n, []string{"b.json", "elsewhere.json", "torn.json"}) {
		t.Errorf("failed holds %v", n)
	}
}
