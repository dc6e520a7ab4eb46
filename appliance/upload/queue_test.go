package upload

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tmpRecording writes a recording's two local files under dataDir.
func tmpRecording(t *testing.T, dataDir, id string) Recording {
	t.Helper()
	dir := filepath.Join(dataDir, "recordings", "2026", "11", "21")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	r := Recording{ID: id, Tenant: "acme", Ext: "200", Start: time.Date(2026, 11, 21, 15, 12, 30, 0, time.UTC),
		Audio: filepath.Join(dir, id+".wav"), Sidecar: filepath.Join(dir, id+".json")}
	if err := os.WriteFile(r.Audio, []byte("RIFF-"+id+strings.Repeat("x", 4000)), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.Sidecar, []byte(`{"id":"`+id+`"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	return r
}

type queueEnv struct {
	t       *testing.T
	dataDir string
	srv     *s3Server
	proxy   *headerProxy
	store   *S3
	opts    Options
}

func newQueueEnv(t *testing.T) *queueEnv {
	t.Helper()
	e := &queueEnv{t: t, dataDir: t.TempDir(), srv: startS3(t)}
	u, _ := url.Parse(e.srv.endpoint)
	e.proxy = &headerProxy{next: httputil.NewSingleHostReverseProxy(u)}
	ps := httptest.NewServer(e.proxy)
	t.Cleanup(ps.Close)
	e.store = e.srv.client(t, S3Options{})
	// Through the proxy, to count what reaches the store.
	c, err := NewS3(context.Background(), S3Options{Bucket: testBucket, Endpoint: ps.URL, PathStyle: true, AccessKeyID: testAccess, SecretAccessKey: testSecret, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.opts = Options{DataDir: e.dataDir, Store: c, KeyPrefix: "{tenant}/recordings/{yyyy}/{mm}/{dd}/{callid}.wav", KeepLocal: true,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	return e
}

// run starts a queue; the returned func stops it and waits.
func (e *queueEnv) run(q *Queue) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

func (e *queueEnv) open() *Queue {
	e.t.Helper()
	q, err := New(e.opts, discard())
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestQueueUploadsAudioThenSidecarAndRemovesLocalOnlyAfter(t *testing.T) {
	e := newQueueEnv(t)
	e.opts.KeepLocal = false
	q := e.open()
	stop := e.run(q)
	defer stop()
	var recs []Recording
	for i := range 3 {
		r := tmpRecording(t, e.dataDir, fmt.Sprintf("20261121T151230.12%dZ-abc", i))
		if err := q.Enqueue(r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	waitUntil(t, "the queue to empty", 10*time.Second, func() bool { return q.Pending() == 0 })
	for _, r := range recs {
		key := "acme/recordings/2026/11/21/" + r.ID
		a, err := e.srv.object(key + ".wav")
		want, _ := os.ReadFile(r.Sidecar)
		m, err2 := e.srv.object(key + ".json")
		if err != nil || err2 != nil || !bytes.HasPrefix(a, []byte("RIFF-"+r.ID)) || !bytes.Equal(m, want) {
			t.Errorf("%s: objects %v %v", r.ID, err, err2)
		}
		if _, err := os.Stat(r.Audio); !os.IsNotExist(err) {
			t.Errorf("%s: keepLocal false kept the audio: %v", r.ID, err)
		}
		if _, err := os.Stat(r.Sidecar); err != nil {
			t.Errorf("%s: the sidecar went: %v", r.ID, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "uploads", "pending")); len(ents) != 0 {
		t.Errorf("pending not empty: %d", len(ents))
	}
	// Each object once, the audio before its sidecar.
	keys := e.proxy.keys()
	if len(keys) != 6 {
		t.Errorf("PUTs %v, want 6", keys)
	}
	for _, r := range recs {
		base := "acme/recordings/2026/11/21/" + r.ID
		ia, im := slices.Index(keys, base+".wav"), slices.Index(keys, base+".json")
		if ia < 0 || im < ia {
			t.Errorf("%s: audio PUT at %d, sidecar at %d", r.ID, ia, im)
		}
	}
}
