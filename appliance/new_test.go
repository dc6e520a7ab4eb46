package appliance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pbx/appliance/config"
)

// TestNewFailureReturnsError: a part that fails to start (here the data
// directory, which is a file) makes New return an error, releasing what it
// built, rather than panic.
func TestNewFailureReturnsError(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	doc := "configVersion: pbx/v1\nkind: System\nspec:\n  sip:\n    bindHost: 127.0.0.1\n  dataDir: " + file + "\n"
	cfg, rep := config.LoadBytes(root, "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		t.Fatalf("config: %v", rep.Err())
	}
	a, err := New(cfg, Options{}, nil)
	if err == nil || a != nil || !strings.Contains(err.Error(), "data directory") {
		t.Fatalf("New over a file as data directory: %v, %v", a, err)
	}
}
