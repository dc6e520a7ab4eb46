package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pbx/appliance/upload/uploadtest"
)

// TestRecordingUploadedToS3: with storage s3 (versitygw) and keepLocal
// false, a recorded call's WAV and sidecar arrive under the key template's
// keys, the local WAV goes only after the upload while the sidecar stays,
// the API still serves the audio (from the store), and /v1/status shows
// the queue empty.
func TestRecordingUploadedToS3(t *testing.T) {
	s3 := uploadtest.Start(t)
	api := freePort(t)
	p := startPBX(t, s3Config(s3, api, false))
	recordedCall(t, p, 2000)
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", api), token: recToken}
	var list struct {
		Recordings []struct {
			ID, SHA256 string
			Start      time.Time
			Bytes      int64
		} `json:"recordings"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(list.Recordings) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no recording listed")
		}
		time.Sleep(50 * time.Millisecond)
		c.getJSON("/v1/recordings", &list)
	}
	sc := list.Recordings[0]
	local := sc.Start.Local()
	key := fmt.Sprintf("demo/%%s/%s/101-%s.wav", local.Format("2006/01/02"), sc.ID)
	var audio, meta []byte
	for {
		audio, _ = s3.Object(fmt.Sprintf(key, "audio"))
		meta, _ = s3.Object(fmt.Sprintf(key, "meta"))
		if audio != nil && meta != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects %q not in the store; log:\n%s", key, tail(withoutDebug(p.log.String()), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if int64(len(audio)) != sc.Bytes || !bytes.HasPrefix(audio, []byte("RIFF")) {
		t.Errorf("stored audio of %d bytes, sidecar says %d", len(audio), sc.Bytes)
	}
	day := filepath.Join(p.dataDir, "recordings", local.Format("2006/01/02"))
	sidecar, err := os.ReadFile(filepath.Join(day, sc.ID+".json"))
	if err != nil || !bytes.Equal(sidecar, meta) {
		t.Errorf("stored sidecar differs from the local one: %v", err)
	}
	// keepLocal false: the WAV goes once uploaded (the job is done first).
	for {
		if _, err := os.Stat(filepath.Join(day, sc.ID+".wav")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the local WAV is still there after the upload")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ents, _ := os.ReadDir(filepath.Join(p.dataDir, "uploads", "pending")); len(ents) != 0 {
		t.Errorf("uploads/pending not empty: %d", len(ents))
	}
	code, got := c.do("GET", "/v1/recordings/demo/"+sc.ID+"/audio")
	if code != 200 || !bytes.Equal(got, audio) {
		t.Errorf("audio from the store: %d, %d bytes", code, len(got))
	}
	var status struct {
		Uploads *struct {
			Pending, Failed int
		}
	}
	c.getJSON("/v1/status", &status)
	if status.Uploads == nil || status.Uploads.Pending != 0 || status.Uploads.Failed != 0 {
		t.Errorf("status uploads %+v", status.Uploads)
	}
}

// s3Config is a PBX recording internal calls to the versitygw s3.
func s3Config(s3 *uploadtest.Server, api int, keepLocal bool) pbxConfig {
	return pbxConfig{
		APIPort: api,
		Recording: fmt.Sprintf(`  recording:
    enabled: true
    mode: internal
    storage: s3
    keepLocal: %t
  storage:
    s3:
      bucket: %s
      endpoint: %s
      pathStyle: true
      accessKeyId: %s
      secretAccessKey: %s
      keyPrefix: "{tenant}/{kind}/{yyyy}/{mm}/{dd}/{ext}-{callid}.wav"
      sse: AES256
      storageClass: STANDARD
      timeout: 5s
`, keepLocal, uploadtest.Bucket, s3.Endpoint, uploadtest.Access, uploadtest.Secret),
		Tokens: "      - name: rec\n        token: " + recToken + "\n        scopes: [recordings:read, status:read]\n",
	}
}

// recordedCall makes one call from alice (100) to bob (101), each playing
// a capture, lasting about ms milliseconds.
func recordedCall(t *testing.T, p *pbxProc, ms int) {
	t.Helper()
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	if err := writeRTPCaptureOf(filepath.Join(dir, "callee.pcap"), 150, 0xca11ee, func(i, j int) byte { return byte(0x55 ^ (i*11 + j*3)) }); err != nil {
		t.Fatal(err)
	}
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer_play.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", strconv.Itoa(ms), "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
}

// TestRecordingUploadSurvivesOutageAndSIGKILL: the store is down when the
// call ends, so the upload fails and waits in its job file (visible in
// /v1/status); the PBX is killed with SIGKILL; once the store and the PBX
// are back, the recording arrives and the job is done.
func TestRecordingUploadSurvivesOutageAndSIGKILL(t *testing.T) {
	t.Setenv("PBX_TEST_UPLOAD_BACKOFF", "200ms")
	s3 := uploadtest.Start(t)
	s3.Stop()
	api := freePort(t)
	p := startPBX(t, s3Config(s3, api, true))
	recordedCall(t, p, 1500)
	pending := filepath.Join(p.dataDir, "uploads", "pending")
	var job struct {
		ID       string
		Attempts int
		Keys     struct{ Audio, Meta string }
	}
	deadline := time.Now().Add(15 * time.Second)
	for job.Attempts < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed upload attempts recorded; log:\n%s", tail(withoutDebug(p.log.String()), 30))
		}
		time.Sleep(50 * time.Millisecond)
		ents, _ := os.ReadDir(pending)
		if len(ents) == 1 {
			b, _ := os.ReadFile(filepath.Join(pending, ents[0].Name()))
			_ = json.Unmarshal(b, &job)
		}
	}
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", api), token: recToken}
	var status struct {
		Uploads *struct{ Pending int }
	}
	c.getJSON("/v1/status", &status)
	if status.Uploads == nil || status.Uploads.Pending != 1 {
		t.Errorf("status while the store is down: %+v", status.Uploads)
	}
	p.kill()
	s3.Restart()
	p.start()
	for {
		a, _ := s3.Object(job.Keys.Audio)
		m, _ := s3.Object(job.Keys.Meta)
		ents, _ := os.ReadDir(pending)
		if a != nil && m != nil && len(ents) == 0 {
			break
		}
		if time.Now().After(deadline.Add(15 * time.Second)) {
			t.Fatalf("recording %s not uploaded after the restart; log:\n%s", job.ID, tail(withoutDebug(p.log.String()), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ents, _ := os.ReadDir(filepath.Join(p.dataDir, "uploads", "failed")); len(ents) != 0 {
		t.Errorf("uploads/failed has %d jobs", len(ents))
	}
}

// TestUploadBacklogAndQuarantine: with the store down and maxPending 1, the
// first recorded call queues its upload and the second is not recorded,
// its record step saying why; after a restart with an unparsable job file
// and a job whose audio vanished planted in uploads/pending, both end in
// uploads/failed (nothing deleted, /v1/status counts them) while the real
// recording still arrives once the store is back.
func TestUploadBacklogAndQuarantine(t *testing.T) {
	t.Setenv("PBX_TEST_UPLOAD_BACKOFF", "200ms")
	s3 := uploadtest.Start(t)
	s3.Stop()
	api := freePort(t)
	cfg := s3Config(s3, api, true)
	cfg.Recording = strings.Replace(cfg.Recording, "    keepLocal: true\n", "    keepLocal: true\n    maxPending: 1\n", 1)
	cfg.Tokens = "      - name: rec\n        token: " + recToken + "\n        scopes: [recordings:read, status:read, cdr:read]\n"
	cfg.APIRate = 6000
	p := startPBX(t, cfg)
	c := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", api), token: recToken}
	recordedCall(t, p, 800)
	pending := filepath.Join(p.dataDir, "uploads", "pending")
	waitDir := func(dir string, n int, what string) []os.DirEntry {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ents, _ := os.ReadDir(dir)
			var jobs []os.DirEntry
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), ".json") {
					jobs = append(jobs, e)
				}
			}
			if len(jobs) == n {
				return jobs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d job files, want %d; log:\n%s", what, len(jobs), n, tail(withoutDebug(p.log.String()), 30))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	first := waitDir(pending, 1, "first call's upload queued")
	var job struct{ Keys struct{ Audio, Meta string } }
	if b, err := os.ReadFile(filepath.Join(pending, first[0].Name())); err != nil || json.Unmarshal(b, &job) != nil || job.Keys.Audio == "" {
		t.Fatalf("job file %s: %v %+v", first[0].Name(), err, job)
	}
	recordedCall(t, p, 800)
	var list struct {
		Records []struct{ ID string } `json:"records"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(list.Records) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("call records: %+v", list.Records)
		}
		time.Sleep(100 * time.Millisecond)
		c.getJSON("/v1/cdr?tenant=demo", &list)
	}
	var armed, refused int
	for _, r := range list.Records {
		var rec struct {
			Steps []struct{ Type, Result, Error string }
		}
		c.getJSON("/v1/cdr/demo/"+r.ID, &rec)
		for _, s := range rec.Steps {
			if s.Type != "record" {
				continue
			}
			switch {
			case s.Result == "disarmed by maxPending" && strings.Contains(s.Error, "maxPending is 1"):
				refused++
			case strings.HasPrefix(s.Result, "armed"):
				armed++
			}
		}
	}
	if armed != 1 || refused != 1 {
		t.Errorf("record steps: %d armed, %d refused by the backlog; records %+v", armed, refused, list.Records)
	}
	waitDir(pending, 1, "the second call queues nothing")

	p.stop()
	if err := os.WriteFile(filepath.Join(pending, "torn.json"), []byte(`{"id": "torn", "ten`), 0o600); err != nil {
		t.Fatal(err)
	}
	ghost := fmt.Sprintf(`{"id": "ghost", "tenant": "demo", "audio": %q, "sidecar": %q, "keys": {"audio": "demo/ghost.wav", "meta": "demo/ghost.json"}, "created_at": %q}`,
		filepath.Join(p.dataDir, "recordings", "gone.wav"), filepath.Join(p.dataDir, "recordings", "gone.json"), time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(pending, "ghost.json"), []byte(ghost), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	s3.Restart()
	failed := waitDir(filepath.Join(p.dataDir, "uploads", "failed"), 2, "bad jobs quarantined")
	names := []string{failed[0].Name(), failed[1].Name()}
	if !slices.Contains(names, "torn.json") || !slices.Contains(names, "ghost.json") {
		t.Errorf("uploads/failed holds %v", names)
	}
	if b, err := os.ReadFile(filepath.Join(p.dataDir, "uploads", "failed", "torn.json")); err != nil || string(b) != `{"id": "torn", "ten` {
		t.Errorf("the torn job was not kept as it was: %q %v", b, err)
	}
	waitDir(pending, 0, "the real recording uploaded")
	if a, _ := s3.Object(job.Keys.Audio); a == nil {
		t.Errorf("the first call's recording is not in the store under %s", job.Keys.Audio)
	}
	var status struct {
		Uploads *struct{ Pending, Failed int }
	}
	c.getJSON("/v1/status", &status)
	if status.Uploads == nil || status.Uploads.Pending != 0 || status.Uploads.Failed != 2 {
		t.Errorf("status uploads %+v, want 0 pending and 2 failed", status.Uploads)
	}
	log := withoutDebug(p.log.String())
	if !strings.Contains(log, "upload job unreadable") || !strings.Contains(log, "ghost") {
		t.Errorf("no error lines for the quarantined jobs; log:\n%s", tail(log, 30))
	}
}
