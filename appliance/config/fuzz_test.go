package config

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// corpusFiles returns every YAML document file under testdata.
func corpusFiles(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	err := filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || (filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".yml") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil // the dangling file.read link, when a run left it behind
		}
		out = append(out, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 150 {
		t.Fatalf("only %d corpus files", len(out))
	}
	return out
}

// FuzzLoad feeds arbitrary bytes to the loader as one document file. Whatever the
// input, loading must not panic or take more than ten seconds, every problem must carry a registered
// rule and a position, the migration must not fail on what the loader parsed, and
// Print must work on whatever configuration came out.
func FuzzLoad(f *testing.F) {
	for _, b := range corpusFiles(f) {
		f.Add(b)
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzing engine has no time limit per input; a hang would only stall it.
		// Crashing the worker makes the engine keep the input as a failure.
		watchdog := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("FuzzLoad: one input took over 10s: %q", data[:min(len(data), 300)]))
		})
		defer watchdog.Stop()
		cfg, rep := LoadBytes(root, "f.yaml", data, Options{Getenv: noEnv})
		for _, p := range append(append([]Problem(nil), rep.Problems...), rep.Warnings...) {
			if _, ok := rules[p.Rule]; !ok {
				t.Fatalf("problem with unregistered rule %q: %s", p.Rule, p)
			}
			if p.Rule == "file.empty" {
				continue
			}
			if p.File != "f.yaml" || p.Line < 1 || p.Msg == "" {
				t.Fatalf("problem without a position or message: %+v", p)
			}
		}
		var b bytes.Buffer
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(b.String(), "\n"); got != len(rep.Problems)+len(rep.Warnings) {
			t.Fatalf("%d lines for %d problems and warnings:\n%s", got, len(rep.Problems)+len(rep.Warnings), b.String())
		}
		if err := Print(&bytes.Buffer{}, cfg); err != nil {
			t.Fatalf("Print: %v", err)
		}
		m, err := migrateFile("f.yaml", data)
		if err != nil {
			return // a syntax error: refused, as validation reports it
		}
		if m != nil && len(m.Before) != len(data) {
			t.Fatal("migration changed its input")
		}
	})
}

// TestAliasExpansionRefused: a small document whose aliases expand to millions of
// values is refused at once with one problem instead of being expanded.
func TestAliasExpansionRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("configVersion: pbx/v1\nkind: System\nspec:\n  media:\n    codecs: &s [")
	for i := range 3000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("g729")
	}
	b.WriteString("]\n  api:\n    enabled: true\n    tokens: [")
	for i := range 3000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("{name: a, scopes: *s}")
	}
	b.WriteString("]\n")
	start := time.Now()
	_, rep := LoadBytes(t.TempDir(), "bomb.yaml", []byte(b.String()), Options{Getenv: noEnv})
	if len(rep.Problems) != 1 || rep.Problems[0].Rule != "doc.aliases" {
		t.Fatalf("want one doc.aliases problem, got %d problems, first %v", len(rep.Problems), rep.Problems[:min(3, len(rep.Problems))])
	}
	// Expanded, this input gives nine million problems and takes minutes.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestAliasesAllowed: ordinary use of anchors and aliases, and an alias to the
// value that contains it, load normally.
func TestAliasesAllowed(t *testing.T) {
	doc := `configVersion: pbx/v1
kind: System
spec:
  api:
    enabled: true
    bindPort: 8080
    tokens:
      - name: a
        hash: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        scopes: &read [status:read, cdr:read]
      - name: b
        hash: sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
        scopes: *read
`
	cfg, rep := LoadBytes(t.TempDir(), "s.yaml", []byte(doc), Options{Getenv: noEnv})
	mustOK(t, rep)
	if got := cfg.System.API.Tokens[1].Scopes; len(got) != 2 || got[1] != "cdr:read" {
		t.Errorf("aliased scopes %v", got)
	}
	_, rep = LoadBytes(t.TempDir(), "s.yaml", []byte("configVersion: pbx/v1\nkind: System\nspec:\n  sip: &s\n    tls: *s\n"), Options{Getenv: noEnv})
	if len(rep.Problems) != 1 || rep.Problems[0].Rule != "decode.unknownKey" || rep.Problems[0].Path != "sip.tls.tls" {
		t.Errorf("self-referring alias: %v", rep.Problems)
	}
}
