package e2e

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func pbxctl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "pbxctl"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

func repoRoot() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..")
}

// TestBundledConfigurationsValidate: the packaged /etc/pbx, the quickstart and the
// shipped examples are clean for the very validator the package ships.
func TestBundledConfigurationsValidate(t *testing.T) {
	for _, dir := range []string{"packaging/config", "packaging/quickstart", "packaging/examples/office"} {
		code, out := pbxctl(t, "validate", filepath.Join(repoRoot(), dir))
		if code != 0 || !strings.Contains(out, "configuration is valid") {
			t.Errorf("pbxctl validate %s: exit %d\n%s", dir, code, out)
		}
	}
}

// TestOfflineToolsRespectTheDaemon: repair and reindex refuse while bin/pbx holds
// the data directory, and once it stopped they run and are idempotent.
func TestOfflineToolsRespectTheDaemon(t *testing.T) {
	p := startPBX(t, pbxConfig{})
	for _, sub := range []string{"repair", "reindex"} {
		code, out := pbxctl(t, sub, "--config", p.dir)
		if code != 1 || !strings.Contains(out, "daemon is running") {
			t.Errorf("pbxctl %s while pbx runs: exit %d\n%s", sub, code, out)
		}
	}
	p.stop()
	for _, sub := range []string{"repair", "reindex"} {
		for i := 0; i < 2; i++ {
			if code, out := pbxctl(t, sub, "--config", p.dir); code != 0 {
				t.Errorf("pbxctl %s (run %d) after stop: exit %d\n%s", sub, i+1, code, out)
			}
		}
	}
	if code, out := pbxctl(t, "repair", "--dry-run", "--config", p.dir); code != 0 || !strings.Contains(strings.ToLower(out), "nothing") {
		t.Errorf("second repair should find nothing: exit %d\n%s", code, out)
	}
}
