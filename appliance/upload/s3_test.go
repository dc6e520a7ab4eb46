package upload

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestS3PutAndGetAgainstVersitygw(t *testing.T) {
	srv := startS3(t)
	c := srv.client(t, S3Options{})
	path := filepath.Join(t.TempDir(), "a.wav")
	body := bytes.Repeat([]byte("RIFF-audio-"), 5000)
	if err := os.WriteFile(path, body, 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Put(ctx, "acme/recordings/2026/11/21/x.wav", path, "audio/wav"); err != nil {
		t.Fatal(err)
	}
	got, err := srv.object("acme/recordings/2026/11/21/x.wav")
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored object: %d bytes, %v", len(got), err)
	}
	rc, n, err := c.Get(ctx, "acme/recordings/2026/11/21/x.wav")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if n != int64(len(body)) || !bytes.Equal(b, body) {
		t.Errorf("get: %d bytes (length %d)", len(b), n)
	}
	if _, _, err := c.Get(ctx, "acme/none.wav"); !errors.Is(err, ErrNoObject) {
		t.Errorf("missing object: %v", err)
	}
	// Wrong credentials are an error, not a silent success.
	bad, _ := NewS3(ctx, S3Options{Bucket: testBucket, Endpoint: srv.endpoint, PathStyle: true, AccessKeyID: testAccess, SecretAccessKey: "wrong-secret"})
	if err := bad.Put(ctx, "acme/y.wav", path, "audio/wav"); err == nil {
		t.Error("put with a wrong secret succeeded")
	}
}

// headerProxy forwards to the S3 server and keeps the path and headers of
// every PUT.
type headerProxy struct {
	mu   sync.Mutex
	puts []put
	next *httputil.ReverseProxy
}

type put struct {
	path   string
	h      http.Header
	status int
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (h *headerProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		h.next.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	hd := r.Header.Clone()
	h.next.ServeHTTP(sw, r)
	h.mu.Lock()
	h.puts = append(h.puts, put{r.URL.Path, hd, sw.status})
	h.mu.Unlock()
}

// stored counts the PUTs of each key the store accepted.
func (h *headerProxy) stored() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, p := range h.puts {
		if p.status/100 == 2 {
			out[strings.TrimPrefix(p.path, "/"+testBucket+"/")]++
		}
	}
	return out
}

// keys lists the object keys PUT so far, in order.
func (h *headerProxy) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, p := range h.puts {
		out = append(out, strings.TrimPrefix(p.path, "/"+testBucket+"/"))
	}
	return out
}

func TestS3SendsEncryptionAndStorageClass(t *testing.T) {
	srv := startS3(t)
	u, _ := url.Parse(srv.endpoint)
	hp := &headerProxy{next: httputil.NewSingleHostReverseProxy(u)}
	proxy := httptest.NewServer(hp)
	defer proxy.Close()
	path := filepath.Join(t.TempDir(), "a.wav")
	if err := os.WriteFile(path, []byte("RIFF"), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		o               S3Options
		sse, kms, class string
	}{
		{S3Options{SSE: "AES256", StorageClass: "STANDARD_IA"}, "AES256", "", "STANDARD_IA"},
		{S3Options{SSE: "aws:kms", KMSKeyID: "key-1"}, "aws:kms", "key-1", ""},
		{S3Options{}, "", "", ""},
	} {
		tc.o.Bucket, tc.o.Endpoint, tc.o.PathStyle, tc.o.AccessKeyID, tc.o.SecretAccessKey = testBucket, proxy.URL, true, testAccess, testSecret
		c, err := NewS3(ctx, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		hp.mu.Lock()
		hp.puts = nil
		hp.mu.Unlock()
		err = c.Put(ctx, "k.wav", path, "audio/wav")
		hp.mu.Lock()
		h := hp.puts[len(hp.puts)-1].h
		hp.mu.Unlock()
		if got := h.Get("X-Amz-Server-Side-Encryption"); got != tc.sse {
			t.Errorf("%+v: sse header %q", tc.o, got)
		}
		if got := h.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"); got != tc.kms {
			t.Errorf("%+v: kms header %q", tc.o, got)
		}
		if got, ok := h["X-Amz-Storage-Class"]; ok != (tc.class != "") || h.Get("X-Amz-Storage-Class") != tc.class {
			t.Errorf("%+v: storage class header %q (present %t)", tc.o, got, ok)
		}
		if err != nil {
			t.Errorf("sse %q, class %q: the store refused: %v", tc.sse, tc.class, err)
		}
	}
}

func TestS3IfAbsentStoresOnce(t *testing.T) {
	srv := startS3(t)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "1"), filepath.Join(dir, "2")
	if err := os.WriteFile(first, []byte("first"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(second, []byte("second"), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := srv.client(t, S3Options{IfAbsent: true})
	if err := c.Put(ctx, "k.wav", first, "audio/wav"); err != nil {
		t.Fatal(err)
	}
	// A repeated PUT of the key is a success that stores nothing.
	if err := c.Put(ctx, "k.wav", second, "audio/wav"); err != nil {
		t.Fatalf("repeated put: %v", err)
	}
	if got, _ := srv.object("k.wav"); string(got) != "first" {
		t.Errorf("object %q after a repeated put, want the first", got)
	}
	// Without IfAbsent a PUT replaces.
	if err := srv.client(t, S3Options{}).Put(ctx, "k.wav", second, "audio/wav"); err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.object("k.wav"); string(got) != "second" {
		t.Errorf("object %q after a plain put", got)
	}
}
