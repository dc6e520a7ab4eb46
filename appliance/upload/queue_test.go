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

func TestQueueStoreDownThenBackEveryRecordingOnce(t *testing.T) {
	e := newQueueEnv(t)
	e.srv.stop()
	q := e.open()
	stop := e.run(q)
	defer stop()
	var recs []Recording
	for i := range 4 {
		r := tmpRecording(t, e.dataDir, fmt.Sprintf("20261121T151230.00%dZ-down", i))
		if err := q.Enqueue(r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	// Every job fails at least twice while the store is down, and says so
	// in its file.
	waitUntil(t, "failed attempts", 10*time.Second, func() bool {
		for _, r := range recs {
			j, err := readJob(filepath.Join(e.dataDir, "uploads", "pending", r.ID+".json"))
			if err != nil || j.Attempts < 2 || j.LastError == "" || !j.NextAttemptAt.After(j.CreatedAt) {
				return false
			}
		}
		return true
	})
	if s := q.Stats(); s.Pending != 4 || s.OldestAge <= 0 || s.Failed != 0 {
		t.Errorf("stats while down %+v", s)
	}
	e.srv.start()
	waitUntil(t, "the queue to empty", 10*time.Second, func() bool { return q.Pending() == 0 })
	for _, r := range recs {
		base := "acme/recordings/2026/11/21/" + r.ID
		for _, k := range []string{base + ".wav", base + ".json"} {
			if _, err := e.srv.object(k); err != nil {
				t.Errorf("%s not stored: %v", k, err)
			}
		}
		if _, err := os.Stat(r.Audio); err != nil {
			t.Errorf("keepLocal true removed %s", r.Audio)
		}
	}
	// Each object accepted exactly once.
	stored := e.proxy.stored()
	if len(stored) != 8 {
		t.Errorf("%d objects accepted, want 8: %v", len(stored), stored)
	}
	for k, n := range stored {
		if n != 1 {
			t.Errorf("%s accepted %d times", k, n)
		}
	}
}

func TestQueueRestartDoesNotRepeatAConfirmedPut(t *testing.T) {
	e := newQueueEnv(t)
	r := tmpRecording(t, e.dataDir, "20261121T151230.000Z-restart")
	q := e.open()
	if err := q.Enqueue(r); err != nil {
		t.Fatal(err)
	}
	// As a process killed between the two PUTs leaves it: the audio
	// confirmed in the job file, the sidecar not.
	path := filepath.Join(e.dataDir, "uploads", "pending", r.ID+".json")
	j, err := readJob(path)
	if err != nil {
		t.Fatal(err)
	}
	j.Uploaded.Audio = true
	if err := writeJob(path, j); err != nil {
		t.Fatal(err)
	}
	q = e.open() // the restart
	stop := e.run(q)
	defer stop()
	waitUntil(t, "the queue to empty", 10*time.Second, func() bool { return q.Pending() == 0 })
	if keys := e.proxy.keys(); len(keys) != 1 || !strings.HasSuffix(keys[0], ".json") {
		t.Errorf("PUTs after the restart %v, want only the sidecar", keys)
	}
}

func TestQueueFailedJobs(t *testing.T) {
	e := newQueueEnv(t)
	pending, failed := filepath.Join(e.dataDir, "uploads", "pending"), filepath.Join(e.dataDir, "uploads", "failed")
	if err := os.MkdirAll(pending, 0o750); err != nil {
		t.Fatal(err)
	}
	// An unparsable job file is quarantined at start.
	if err := os.WriteFile(filepath.Join(pending, "20261121T000000.000Z-garbage.json"), []byte("{not json"), 0o640); err != nil {
		t.Fatal(err)
	}
	e.opts.GiveUp = 400 * time.Millisecond
	q := e.open()
	if _, err := os.Stat(filepath.Join(failed, "20261121T000000.000Z-garbage.json")); err != nil {
		t.Errorf("unparsable job not quarantined: %v", err)
	}
	stop := e.run(q)
	defer stop()
	// A local file that vanished before upload.
	gone := tmpRecording(t, e.dataDir, "20261121T151230.000Z-vanished")
	os.Remove(gone.Audio)
	if err := q.Enqueue(gone); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the vanished file's job to fail", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(failed, gone.ID+".json"))
		return err == nil
	})
	if _, err := os.Stat(gone.Sidecar); err != nil {
		t.Errorf("the sidecar of a failed job was deleted: %v", err)
	}
	// A store that never answers: given up after GiveUp, nothing deleted.
	e.srv.stop()
	down := tmpRecording(t, e.dataDir, "20261121T151230.000Z-giveup")
	if err := q.Enqueue(down); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the job to be given up", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(failed, down.ID+".json"))
		return err == nil
	})
	j, err := readJob(filepath.Join(failed, down.ID+".json"))
	if err != nil || j.Attempts < 2 || j.LastError == "" {
		t.Errorf("failed job %+v, %v", j, err)
	}
	if _, err := os.Stat(down.Audio); err != nil {
		t.Errorf("the audio of a failed job was deleted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pending, down.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("a failed job still pending: %v", err)
	}
	if s := q.Stats(); s.Failed != 3 || s.Pending != 0 {
		t.Errorf("stats %+v, want 3 failed", s)
	}
}

func TestBackoffDoublesToTheCeilingWithJitter(t *testing.T) {
	q := &Queue{opts: Options{BackoffMin: DefaultBackoffMin, BackoffMax: DefaultBackoffMax}}
	for n, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 7: 30 * time.Minute, 50: 30 * time.Minute} {
		seen := map[time.Duration]bool{}
		for range 50 {
			d := q.backoff(n)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: backoff %s outside [%s, %s]", n, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: %d distinct waits in 50: no jitter", n, len(seen))
		}
	}
}

func TestQueueCrashAfterAPutStoresItOnce(t *testing.T) {
	e := newQueueEnv(t)
	// The store through the proxy, with If-None-Match as the appliance
	// sets it for keys with {callid}.
	c := e.opts.Store.(*S3)
	c.o.IfAbsent = true
	r := tmpRecording(t, e.dataDir, "20261121T151230.000Z-twice")
	q := e.open()
	if err := q.Enqueue(r); err != nil {
		t.Fatal(err)
	}
	// A process killed after the store took the audio and before the job
	// file said so: the object is there, the job says nothing.
	key := "acme/recordings/2026/11/21/" + r.ID
	if err := c.Put(context.Background(), key+".wav", r.Audio, "audio/wav"); err != nil {
		t.Fatal(err)
	}
	q = e.open() // the restart
	stop := e.run(q)
	defer stop()
	waitUntil(t, "the queue to empty", 10*time.Second, func() bool { return q.Pending() == 0 })
	stored := e.proxy.stored()
	if stored[key+".wav"] != 1 || stored[key+".json"] != 1 {
		t.Errorf("objects stored %v, want each once", stored)
	}
}
