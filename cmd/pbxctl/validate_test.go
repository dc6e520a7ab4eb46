package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runCLI runs the pbxctl command tree as main does and returns exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	return exitCode(root.Execute(), &errOut), out.String(), errOut.String()
}

const goodSystem = `configVersion: pbx/v1
kind: System
spec:
  sip: {bindHost: 127.0.0.1, transports: [udp]}
`

func TestValidateExitCodes(t *testing.T) {
	good := t.TempDir()
	write(t, good, "pbx.yaml", goodSystem)
	bad := t.TempDir()
	write(t, bad, "a/pbx.yaml", goodSystem+"  media: {codecs: [g729]}\n")
	write(t, bad, "b.yml", "configVersion: pbx/v1\nkind: Trunk\nmetadata: {name: t}\nspec: {prot: 1}\n")

	code, out, _ := runCLI(t, "", "validate", good)
	if code != 0 || !strings.Contains(out, "configuration is valid") {
		t.Errorf("clean: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "validate", "--config", bad)
	want := []string{
		`a/pbx.yaml:5: System: media.codecs[0]: unsupported codec "g729": only alaw and ulaw (no transcoding)`,
		`b.yml:1: Trunk/t: host: host is required`,
		`b.yml:4: Trunk/t: prot: unknown key "prot" (did you mean "port"?)`,
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing line %q in:\n%s", w, out)
		}
	}
	if code != 1 {
		t.Errorf("problems: exit %d, want 1", code)
	}
	code, out, _ = runCLI(t, "", "validate", "--format", "json", bad)
	var rep struct {
		Problems []struct {
			File, Kind, Name, Path, Message string
			Line                            int
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || len(rep.Problems) < 3 {
		t.Errorf("json: exit %d err %v\n%s", code, err, out)
	}
	if code, _, _ = runCLI(t, "", "validate", "--format", "xml", good); code != 2 {
		t.Errorf("bad --format: exit %d, want 2", code)
	}
	if code, _, _ = runCLI(t, "", "validate", filepath.Join(good, "missing")); code != 2 {
		t.Errorf("missing directory: exit %d, want 2", code)
	}
	if code, _, _ = runCLI(t, "", "validate", "--no-such-flag"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
}

func TestTokenHash(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	code, out, _ := runCLI(t, tok+"\n", "token", "hash")
	sum := sha256.Sum256([]byte(tok))
	if want := "sha256:" + hex.EncodeToString(sum[:]) + "\n"; code != 0 || out != want {
		t.Fatalf("exit %d: %q, want %q", code, out, want)
	}
	if code, _, _ := runCLI(t, "", "token", "hash"); code != 2 {
		t.Errorf("empty stdin: exit %d, want 2", code)
	}
}

func TestConfigMigrate(t *testing.T) {
	dir := t.TempDir()
	orig := "# the room service\nconfigVersion: pbx/v1\nkind: System\nspec:\n  sip:\n    transports: [udp]   # bare\n  dataDir: ./data\n  livekit:\n    url: http://127.0.0.1:7880\n    apiKey: k\n    sipHost: 127.0.0.1\n"
	write(t, dir, "pbx.yaml", orig)
	code, out, _ := runCLI(t, "", "config", "migrate", "--dry-run", dir)
	if code != 0 || !strings.Contains(out, "-  livekit:\n+  roomservice:\n") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "pbx.yaml")); string(b) != orig {
		t.Fatal("dry run changed the file")
	}
	if code, _, _ = runCLI(t, "", "config", "migrate", dir); code != 0 {
		t.Fatalf("migrate: exit %d", code)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pbx.yaml"))
	if string(b) != strings.Replace(orig, "  livekit:", "  roomservice:", 1) {
		t.Errorf("migrated file:\n%s", b)
	}
	if code, _, _ = runCLI(t, "", "validate", dir); code != 0 {
		t.Errorf("migrated configuration does not validate")
	}
}
