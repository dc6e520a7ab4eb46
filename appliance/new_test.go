package appliance

import (
	"fmt"
	"log/slog"
	"net"
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

// TestNewFailureReleasesWhatItBuilt: when a step after the data directory
// fails (here SIP, whose port is taken), New releases the data directory's
// lock and database, so a second New over the same directory succeeds.
func TestNewFailureReleasesWhatItBuilt(t *testing.T) {
	taken, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := taken.LocalAddr().(*net.UDPAddr).Port
	root := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	doc := fmt.Sprintf("configVersion: pbx/v1\nkind: System\nspec:\n  sip:\n    bindHost: 127.0.0.1\n    bindPort: %d\n    transports: [udp]\n  dataDir: %s\n  cdr:\n    enabled: true\n",
		port, filepath.Join(root, "data"))
	cfg, rep := config.LoadBytes(root, "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		t.Fatalf("config: %v", rep.Err())
	}
	a, err := New(cfg, Options{}, log)
	if err == nil || a != nil || !strings.HasPrefix(err.Error(), "sip:") {
		t.Fatalf("New with its SIP port taken: %v, %v", a, err)
	}
	taken.Close()
	a, err = New(cfg, Options{}, log)
	if err != nil {
		t.Fatalf("New over the data directory a failed New left: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
