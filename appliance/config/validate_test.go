package config

import (
	"strings"
	"testing"
)

// TestDataDirWithoutSystem: with no System document at all, a tenant that needs
// dataDir is told so at its own line, not at an empty file name and line 0.
func TestDataDirWithoutSystem(t *testing.T) {
	_, rep := loadFiles(t, map[string]string{
		"tenants.yaml": tenantDoc("acme", "recording:\n  enabled: true\n  mode: all\nmailboxes:\n  - extension: \"100\"\n") +
			"---\nconfigVersion: pbx/v1\nkind: Account\nmetadata:\n  tenant: acme\n  name: alice\nspec:\n  password: pw\n  extension: \"100\"\n",
	}, nil)
	want := "tenants.yaml:8: Tenant/acme: recording.enabled: dataDir is required because of recording on Tenant/acme, mailboxes on Tenant/acme; set dataDir in a System document"
	if len(rep.Problems) != 1 || rep.Problems[0].String() != want || rep.Problems[0].Rule != "dataDir.required" {
		t.Errorf("got %v\nwant %s", rep.Problems, want)
	}
}

// TestProblemOneLine: values from the documents cannot break the one-line format
// or send control sequences to the terminal.
func TestProblemOneLine(t *testing.T) {
	p := Problem{File: "a\nb.yaml", Line: 3, Kind: "Sys\ntem", Name: "x\r\ny", Path: "k\x1b[2J", Msg: "tab\tkept, bell\a, c1\u0085"}
	want := `a\nb.yaml:3: Sys\ntem/x\r\ny: k\x1b[2J: ` + "tab\tkept, bell\\x07, c1\\x85"
	if got := p.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	_, rep := LoadBytes(t.TempDir(), "f.yaml", []byte("configVersion: pbx/v1\nkind: \"Trunk\\nTenant\"\n\"spec\\n\": {}\n"), Options{Getenv: noEnv})
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != len(rep.Problems) || lines != 2 {
		t.Errorf("%d problems in %d lines:\n%s", len(rep.Problems), lines, b.String())
	}
}
