package upload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// versitygwVersion is the S3 server the tests run against (DESIGN 7).
const versitygwVersion = "v1.8.0"

var (
	vgwOnce sync.Once
	vgwPath string
	vgwErr  error
)

// versitygwBin returns the versitygw binary: $PBX_VERSITYGW, else one
// built from its Go module into the user cache directory (once; later
// runs reuse it).
func versitygwBin(t testing.TB) string {
	t.Helper()
	vgwOnce.Do(func() {
		if p := os.Getenv("PBX_VERSITYGW"); p != "" {
			vgwPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			vgwErr = err
			return
		}
		dir := filepath.Join(cache, "pbx-test", "versitygw-"+versitygwVersion)
		vgwPath = filepath.Join(dir, "versitygw")
		if _, err := os.Stat(vgwPath); err == nil {
			return
		}
		cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+versitygwVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		cmd.Dir = os.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			vgwErr = fmt.Errorf("build versitygw %s: %w\n%s", versitygwVersion, err, out)
		}
	})
	if vgwErr != nil {
		t.Fatal(vgwErr)
	}
	return vgwPath
}

// s3Server is a versitygw on loopback with a posix backend.
type s3Server struct {
	t        testing.TB
	endpoint string
	root     string // the posix root: <root>/<bucket>/<key>
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
}

const (
	testAccess = "pbx-test-access"
	testSecret = "pbx-test-secret-0123456789"
	testBucket = "recordings"
)

func startS3(t testing.TB) *s3Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &s3Server{t: t, root: t.TempDir(), port: port, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := os.Mkdir(filepath.Join(s.root, testBucket), 0o755); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *s3Server) start() {
	s.t.Helper()
	s.cmd = exec.Command(versitygwBin(s.t), "--access", testAccess, "--secret", testSecret, "--port", fmt.Sprintf("127.0.0.1:%d", s.port), "posix", s.root)
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, io.Discard
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
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
		case <-s.done:
			s.t.Fatal("versitygw exited at start")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *s3Server) stop() {
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

// object reads an object as the posix backend stored it.
func (s *s3Server) object(key string) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.root, testBucket, key))
}

func (s *s3Server) client(t testing.TB, o S3Options) *S3 {
	t.Helper()
	o.Bucket, o.Endpoint, o.PathStyle, o.AccessKeyID, o.SecretAccessKey = testBucket, s.endpoint, true, testAccess, testSecret
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c, err := NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
