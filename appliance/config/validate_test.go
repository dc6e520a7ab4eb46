package config

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"
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

// TestWriteJSON: the JSON report has the fields DESIGN 5.2 names, lists are never
// null, and the rule id stays internal.
func TestWriteJSON(t *testing.T) {
	for _, dir := range []string{"testdata/good/minimal", "testdata/bad/sip.tlsCertificate"} {
		_, rep := loadDir(t, dir)
		var b strings.Builder
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Problems []map[string]any `json:"problems"`
			Warnings []map[string]any `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
			t.Fatal(err)
		}
		if got.Problems == nil || got.Warnings == nil {
			t.Errorf("%s: null list in %s", dir, b.String())
		}
		if len(got.Problems) != len(rep.Problems) || len(got.Warnings) != len(rep.Warnings) {
			t.Errorf("%s: counts differ: %s", dir, b.String())
		}
		for _, p := range append(got.Problems, got.Warnings...) {
			var keys []string
			for k := range p {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if strings.Join(keys, ",") != "file,kind,line,message,name,path" {
				t.Errorf("%s: keys %v", dir, keys)
			}
		}
	}
}

// TestLoadRoot: a root that is not a directory is an error (pbxctl exits 2), not a
// report; an empty directory is a report with one problem.
func TestLoadRoot(t *testing.T) {
	dir := t.TempDir()
	file := writeRoot(t, map[string]string{"system.yaml": system("")})
	for _, root := range []string{dir + "/missing", file + "/system.yaml"} {
		if _, _, err := Load(root, Options{}); !errors.Is(err, ErrNotDirectory) {
			t.Errorf("Load(%s): %v, want ErrNotDirectory", root, err)
		}
	}
	cfg, rep, err := Load(dir, Options{})
	if err != nil || cfg == nil || len(rep.Problems) != 1 || rep.Problems[0].Rule != "file.empty" || rep.OK() {
		t.Errorf("empty root: %v %v", err, rep.Problems)
	}
	if rep.Err() == nil || !strings.Contains(rep.Err().Error(), "1 problem(s)") {
		t.Errorf("Err() = %v", rep.Err())
	}
}

// TestUnknownNamesWithNoneDefined: a reference to a tenant, trunk or listener when
// none exists says that none is defined instead of suggesting nothing.
func TestUnknownNamesWithNoneDefined(t *testing.T) {
	_, rep := loadFiles(t, map[string]string{
		"system.yaml": system("sip:\n  transports: []\ndefaultTrunk: carrier\n"),
		"docs.yaml": docs(
			"configVersion: pbx/v1\nkind: Account\nmetadata: {name: a, tenant: acme}\nspec: {password: p, extension: '1'}\n",
			"configVersion: pbx/v1\nkind: Trunk\nmetadata: {name: t}\nspec: {host: h, transportId: udp}\n",
		),
	}, nil)
	want := []string{
		`docs.yaml:3: Account/acme/a: metadata.tenant: unknown tenant "acme" (no tenants are defined)`,
		`docs.yaml:9: Trunk/t: transportId: no listener has id "udp" (no listeners are defined)`,
		`system.yaml:5: System: sip.transports: at least one listener is required`,
		`system.yaml:6: System: defaultTrunk: unknown trunk "carrier" (expected one of: t)`,
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseExpires(t *testing.T) {
	for in, want := range map[string]string{
		"2030-12-31":                "2030-12-31T23:59:59.999999999Z",
		"2030-06-30T12:00:00Z":      "2030-06-30T12:00:00Z",
		"2030-06-30T12:00:00+02:00": "2030-06-30T12:00:00+02:00",
	} {
		got, err := ParseExpires(in)
		if err != nil || got.Format(time.RFC3339Nano) != want {
			t.Errorf("ParseExpires(%q) = %v, %v; want %s", in, got.Format(time.RFC3339Nano), err, want)
		}
	}
	for _, in := range []string{"", "2030-12-31T23:59:59", "31.12.2030", "2030-02-30", "tomorrow"} {
		if _, err := ParseExpires(in); err == nil {
			t.Errorf("ParseExpires(%q) accepted", in)
		}
	}
}

func TestKnownKeys(t *testing.T) {
	got := strings.Join(KnownKeys(Webhook{}), ",")
	if got != "events,secret,secretFile,timeout,url" {
		t.Errorf("KnownKeys(Webhook{}) = %s", got)
	}
	keys := KnownKeys(System{})
	keys[0] = "changed"
	if KnownKeys(System{})[0] == "changed" {
		t.Error("KnownKeys returns the cached slice itself")
	}
}
