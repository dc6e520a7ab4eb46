package config

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// copyTree copies a configuration root into a new temporary directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestMigrate(t *testing.T) {
	root := filepath.Join("testdata", "migrate")
	ms, err := Migrate(root)
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]Migration{}
	var diff strings.Builder
	for _, m := range ms {
		byFile[m.File] = m
		diff.WriteString(m.UnifiedDiff())
		for _, n := range m.Notes {
			diff.WriteString("# " + n + "\n")
		}
	}
	golden(t, filepath.Join(root, "expected.diff"), diff.String())

	var files []string
	for f := range byFile {
		files = append(files, f)
	}
	if got := strings.Join(sortedStrings(files), ","); got != "system.yaml,tenants/acme.yaml,tenants/both.yaml,tenants/flow.yaml" {
		t.Errorf("migrated files %s", got)
	}

	// Exactly the key changes: one line per file, the rest byte for byte.
	for _, f := range []string{"system.yaml", "tenants/acme.yaml", "tenants/flow.yaml"} {
		m := byFile[f]
		before := strings.SplitAfter(string(m.Before), "\n")
		after := strings.SplitAfter(string(m.After), "\n")
		if len(before) != len(after) {
			t.Fatalf("%s: line count changed", f)
		}
		changed := 0
		for i := range before {
			if before[i] == after[i] {
				continue
			}
			changed++
			if strings.Replace(before[i], "livekit", "roomservice", 1) != after[i] {
				t.Errorf("%s:%d: %q became %q; only the key may change", f, i+1, before[i], after[i])
			}
		}
		if changed != 1 {
			t.Errorf("%s: %d lines changed, want 1", f, changed)
		}
		if len(m.Notes) != 1 || !strings.Contains(m.Notes[0], "livekit renamed to roomservice") {
			t.Errorf("%s: notes %v", f, m.Notes)
		}
	}
	sys := string(byFile["system.yaml"].After)
	for _, keep := range []string{
		"# Main office PBX.\n",
		"    transports: [udp, tcp]   # bare strings stay bare\n",
		"  dataDir: \"./data\"          # relative, quoted, kept exactly\n",
		"  roomservice:                   # livekit (the room service)\n",
		"    roomPrefix: livekit-\n",
	} {
		if !strings.Contains(sys, keep) {
			t.Errorf("system.yaml after migration lacks %q:\n%s", keep, sys)
		}
	}
	if i, j := strings.Index(sys, "dataDir"), strings.Index(sys, "roomservice"); i > j || j > strings.Index(sys, "timezone") {
		t.Error("key order changed")
	}

	// Both keys: reported, not rewritten.
	both := byFile["tenants/both.yaml"]
	if string(both.After) != string(both.Before) || len(both.Notes) != 1 || !strings.Contains(both.Notes[0], "not rewritten") {
		t.Errorf("both keys: notes %v, changed %v", both.Notes, string(both.After) != string(both.Before))
	}
	if both.UnifiedDiff() != "" {
		t.Errorf("an unchanged file has a diff:\n%s", both.UnifiedDiff())
	}
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// TestMigrateKeepsMeaning: the migrated configuration loads to the same effective
// room service everywhere, without the deprecation warnings, and a second run
// changes nothing more.
func TestMigrateKeepsMeaning(t *testing.T) {
	root := copyTree(t, filepath.Join("testdata", "migrate"))
	os.Remove(filepath.Join(root, "expected.diff"))
	os.Remove(filepath.Join(root, "tenants", "both.yaml")) // refused by validation either way
	before, rep := loadDir(t, root)
	mustOK(t, rep)
	if n := countRule(rep.Warnings, "deprecated.livekit"); n != 3 {
		t.Errorf("%d deprecated.livekit warnings before migration, want 3", n)
	}
	ms, err := Migrate(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := os.WriteFile(filepath.Join(root, m.File), m.After, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	after, rep := loadDir(t, root)
	mustOK(t, rep)
	if n := countRule(rep.Warnings, "deprecated.livekit"); n != 0 {
		t.Errorf("%d deprecated.livekit warnings after migration", n)
	}
	if after.System.DataDir != "./data" || len(after.System.SIP.Transports) != 2 || !after.System.SIP.Transports[0].Bare {
		t.Errorf("dataDir %q, transports %+v", after.System.DataDir, after.System.SIP.Transports)
	}
	for _, name := range []string{"", "acme", "flow"} {
		var tb, ta *Tenant
		if name != "" {
			tb, ta = before.Tenant(name), after.Tenant(name)
		}
		rb, ra := before.RoomServiceFor(tb), after.RoomServiceFor(ta)
		if rb == nil || !reflect.DeepEqual(rb, ra) {
			t.Errorf("tenant %q: room service %+v before, %+v after", name, rb, ra)
		}
	}
	again, err := Migrate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Errorf("a second migration changed %d files", len(again))
	}
}

func countRule(ps []Problem, rule string) int {
	n := 0
	for _, p := range ps {
		if p.Rule == rule {
			n++
		}
	}
	return n
}

func TestMigrateSyntaxError(t *testing.T) {
	root := writeRoot(t, map[string]string{"bad.yaml": "spec: [\n"})
	if _, err := Migrate(root); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("want an error naming bad.yaml, got %v", err)
	}
}

func TestUnifiedDiffNoTrailingNewline(t *testing.T) {
	m := Migration{File: "s.yaml", Before: []byte("a: 1\nlivekit: {}"), After: []byte("a: 1\nroomservice: {}")}
	want := "--- a/s.yaml\n+++ b/s.yaml\n@@ -1,2 +1,2 @@\n a: 1\n-livekit: {}\n\\ No newline at end of file\n+roomservice: {}\n\\ No newline at end of file\n"
	if got := m.UnifiedDiff(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
