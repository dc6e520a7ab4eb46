// Package uploadtest runs a real S3 server for tests: versitygw
// (github.com/versity/versitygw) built from its Go module and started on
// loopback with a posix backend, as DESIGN section 7 says.
package uploadtest

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Version is the versitygw the tests run against.
const Version = "v1.8.0"

// Credentials and bucket of every server started here.
const (
	Access = "pbx-test-access"
	Secret = "pbx-test-secret-0123456789"
	Bucket = "recordings"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the versitygw binary: $PBX_VERSITYGW, else one built
// from its Go module into the user cache directory (once; later runs
// reuse it).
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("PBX_VERSITYGW"); p != "" {
			binPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			binErr = err
			return
		}
		dir := filepath.Join(cache, "pbx-test", "versitygw-"+Version)
		binPath = filepath.Join(dir, "versitygw")
		if _, err := os.Stat(binPath); err == nil {
			return
		}
		cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+Version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		cmd.Dir = os.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("build versitygw %s: %w\n%s", Version, err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// Server is a versitygw on loopback; objects are files under
// Root/Bucket/.
type Server struct {
	t        testing.TB
	Endpoint string
	Root     string
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
}

// Start starts a server with an empty bucket; it stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, Root: t.TempDir(), port: port, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := os.Mkdir(filepath.Join(s.Root, Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Restart starts a stopped server again on the same port and data.
func (s *Server) Restart() {
	s.t.Helper()
	s.cmd = exec.Command(Binary(s.t), "--access", Access, "--secret", Secret, "--port", fmt.Sprintf("127.0.0.1:%d", s.port), "posix", s.Root)
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, io.Discard
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	s.done = done
	cmd := s.cmd
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw did not listen: %v", err)
		}
		select {
		case <-done:
			s.t.Fatal("versitygw exited at start")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills the server (as a store going away would look).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Object reads an object as the posix backend stored it.
func (s *Server) Object(key string) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.Root, Bucket, key))
}
