package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// noEnv is the environment of every corpus load: nothing set, so results do not
// depend on the machine running the tests.
func noEnv(string) string { return "" }

// loadDir loads a configuration root with an empty environment. A root that cannot be
// read is a test failure: every corpus directory exists.
func loadDir(t testing.TB, dir string) (*Config, *Report) {
	t.Helper()
	cfg, rep, err := Load(dir, Options{Getenv: noEnv})
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	return cfg, rep
}

func reportText(t testing.TB, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// golden compares got with the file at path, or rewrites it under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./appliance/config -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-want +got):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+), in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inW, inG := map[string]int{}, map[string]int{}
	for _, l := range w {
		inW[l]++
	}
	for _, l := range g {
		inG[l]++
	}
	var b strings.Builder
	for _, l := range w {
		if inG[l] == 0 {
			b.WriteString("-" + l + "\n")
		}
	}
	for _, l := range g {
		if inW[l] == 0 {
			b.WriteString("+" + l + "\n")
		}
	}
	if b.Len() == 0 {
		b.WriteString("(same lines, different order or count)\n--- want\n" + want + "--- got\n" + got)
	}
	return b.String()
}

func subdirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// isWarningRule reports whether a rule produces warnings rather than problems.
func isWarningRule(rule string) bool {
	for _, p := range []string{"inert.", "pitfall.", "deprecated."} {
		if strings.HasPrefix(rule, p) {
			return true
		}
	}
	return false
}

func rulesOf(ps []Problem) map[string]bool {
	m := map[string]bool{}
	for _, p := range ps {
		m[p.Rule] = true
	}
	return m
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// prepareBad creates what git cannot hold well: for file.read, a dangling symlink
// named x.yaml, which cannot be read even by root.
func prepareBad(t *testing.T, dir, rule string) {
	t.Helper()
	if rule != "file.read" {
		return
	}
	link := filepath.Join(dir, "x.yaml")
	_ = os.Remove(link)
	if err := os.Symlink("does-not-exist.yaml", link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
}

// TestGood loads every testdata/good/<name>/ root: no problems, and exactly the
// warnings in its golden warnings file.
func TestGood(t *testing.T) {
	names := subdirs(t, filepath.Join("testdata", "good"))
	if len(names) < 2 {
		t.Fatalf("expected at least the minimal and full good configurations, found %v", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "good", name)
			_, rep := loadDir(t, dir)
			if !rep.OK() {
				t.Errorf("good configuration has problems:\n%s", reportText(t, rep))
			}
			golden(t, filepath.Join(dir, "warnings"), reportText(t, rep))
		})
	}
}

// TestBad loads every testdata/bad/<rule>/ root and compares the report with its
// expected golden file. The rule the directory is named after must be among the
// rules of the problems (or, for a warning rule, of the warnings, and then the
// configuration must still be valid: warnings never fail validation).
func TestBad(t *testing.T) {
	for _, rule := range subdirs(t, filepath.Join("testdata", "bad")) {
		t.Run(rule, func(t *testing.T) {
			dir := filepath.Join("testdata", "bad", rule)
			prepareBad(t, dir, rule)
			_, rep := loadDir(t, dir)
			golden(t, filepath.Join(dir, "expected"), reportText(t, rep))
			if isWarningRule(rule) {
				if !rulesOf(rep.Warnings)[rule] {
					t.Errorf("no warning with rule %s; warning rules: %v", rule, sortedKeys(rulesOf(rep.Warnings)))
				}
				if !rep.OK() {
					t.Errorf("a warning case must be otherwise valid, got problems:\n%s", reportText(t, rep))
				}
				return
			}
			if !rulesOf(rep.Problems)[rule] {
				t.Errorf("no problem with rule %s; problem rules: %v", rule, sortedKeys(rulesOf(rep.Problems)))
			}
			for _, p := range append(append([]Problem(nil), rep.Problems...), rep.Warnings...) {
				if _, ok := rules[p.Rule]; !ok {
					t.Errorf("unregistered rule %q on %s", p.Rule, p)
				}
			}
		})
	}
}

// TestBadCoversEveryRule fails when a registered rule has no case under testdata/bad,
// or a case names no registered rule.
func TestBadCoversEveryRule(t *testing.T) {
	dirs := map[string]bool{}
	for _, d := range subdirs(t, filepath.Join("testdata", "bad")) {
		dirs[d] = true
		if _, ok := rules[d]; !ok {
			t.Errorf("testdata/bad/%s names no registered rule", d)
		}
	}
	for r := range rules {
		if !dirs[r] {
			t.Errorf("rule %s has no case under testdata/bad/%s", r, r)
		}
	}
}

// TestRuleDescriptions keeps the registry readable: every rule has a description
// and an id of lower-camel segments joined by dots.
func TestRuleDescriptions(t *testing.T) {
	for id, desc := range rules {
		if strings.TrimSpace(desc) == "" {
			t.Errorf("rule %s has no description", id)
		}
		for _, seg := range strings.Split(id, ".") {
			if seg == "" || seg[0] < 'a' || seg[0] > 'z' || strings.ContainsAny(seg, " _-/") {
				t.Errorf("rule id %q: segment %q is not lower camel case", id, seg)
			}
		}
	}
}

// TestTwentyProblems: a root with twenty independent mistakes yields exactly twenty
// problem lines, one per mistake, each from a different rule, sorted by file and line.
func TestTwentyProblems(t *testing.T) {
	dir := filepath.Join("testdata", "twenty")
	_, rep := loadDir(t, dir)
	text := reportText(t, rep)
	golden(t, filepath.Join(dir, "expected"), text)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(rep.Problems) != 20 || len(lines) != 20 {
		t.Fatalf("got %d problems in %d lines, want 20:\n%s", len(rep.Problems), len(lines), text)
	}
	if got := len(rulesOf(rep.Problems)); got != 20 {
		t.Errorf("got %d distinct rules, want 20 (one per mistake): %v", got, sortedKeys(rulesOf(rep.Problems)))
	}
	if !sort.SliceIsSorted(rep.Problems, func(i, j int) bool {
		a, b := rep.Problems[i], rep.Problems[j]
		return a.File < b.File || a.File == b.File && a.Line < b.Line
	}) {
		t.Errorf("problems are not sorted by file and line:\n%s", text)
	}
}

// TestGoodWAVs: the music-on-hold and prompt files of the good configurations are
// what the specification asks for, 8 kHz mono 16-bit PCM WAV, so the corpus stays
// usable by the media code too.
func TestGoodWAVs(t *testing.T) {
	n := 0
	err := filepath.WalkDir(filepath.Join("testdata", "good"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".wav" {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		le16 := func(i int) int { return int(b[i]) | int(b[i+1])<<8 }
		le32 := func(i int) int { return le16(i) | le16(i+2)<<16 }
		if len(b) < 44 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" || string(b[12:16]) != "fmt " {
			t.Errorf("%s: not a RIFF WAVE file with a leading fmt chunk", p)
			return nil
		}
		if format, channels, rate, bits := le16(20), le16(22), le32(24), le16(34); format != 1 || channels != 1 || rate != 8000 || bits != 16 {
			t.Errorf("%s: format %d, %d channel(s), %d Hz, %d bits; want PCM (1), 1, 8000, 16", p, format, channels, rate, bits)
		}
		if string(b[36:40]) != "data" || le32(40) != len(b)-44 || le32(40) == 0 {
			t.Errorf("%s: data chunk of %d bytes in a %d-byte file", p, le32(40), len(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Errorf("found %d WAV files under testdata/good", n)
	}
}
