package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fill writes path until the file system holding it is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// mediaPort returns a port for SIPp's -mp, which binds it and the next
// three (RTP and RTCP of audio and video): the three are taken from the
// harness's sequence so that no other port of the test lands on them.
func mediaPort(t *testing.T) int {
	t.Helper()
	p := freePort(t)
	for range 3 {
		freePort(t)
	}
	return p
}

// countMarkers counts the in-flight markers of tenant demo.
func countMarkers(dataDir string) int {
	es, _ := os.ReadDir(filepath.Join(dataDir, "demo", "cdr", "inflight"))
	n := 0
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	return n
}

type statusBody struct {
	Degraded bool     `json:"degraded"`
	Problems []string `json:"problems"`
}

// TestChaosDiskFullDuringCalls: with the data directory on a small tmpfs
// filled while calls are up and while more calls are made, every call
// still routes, /v1/status reports degraded with the pending count, the
// log says so once (not once a call); once the space is freed every call
// has its record exactly once (files, index and API) and the status is
// normal again.
func TestChaosDiskFullDuringCalls(t *testing.T) {
	const long, short = 5, 10
	data := mountTmpfs(t, 2<<20)
	t.Setenv("PBX_TEST_CDR_RETRY_MAX", "1s")
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, DataDir: data, LogLevel: "info"})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 90*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", strconv.Itoa(long+short),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(mediaPort(t)), "-rtp_echo")
	call := func(name string, n int, hold time.Duration) *sippRun {
		return startSIPp(t, dir, name, 90*time.Second,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
			"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
			"-m", strconv.Itoa(n), "-l", strconv.Itoa(n), "-r", "20", "-d", strconv.Itoa(int(hold/time.Millisecond)),
			"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(mediaPort(t)))
	}

	// Calls answered while there is room end on a full disk; the short
	// calls are answered and end on it.
	longRun := call("long", long, 4*time.Second)
	waitFor(t, "long calls answered", 30*time.Second, func() bool { return countMarkers(data) == long })
	filler := filepath.Join(data, "filler")
	fill(t, filler)
	p.log.mark()
	shortRun := call("short", short, 300*time.Millisecond)
	if code := shortRun.wait(); code != 0 {
		t.Fatalf("short calls on a full disk: sipp exit %d\n%s", code, shortRun.errors(dir))
	}
	if code := longRun.wait(); code != 0 {
		t.Fatalf("long calls: sipp exit %d\n%s", code, longRun.errors(dir))
	}
	var st statusBody
	want := fmt.Sprintf("call records: %d pending", long+short)
	waitFor(t, "status degraded with every record pending", 10*time.Second, func() bool {
		api.getJSON("/v1/status", &st)
		return st.Degraded && len(st.Problems) == 1 && strings.HasPrefix(st.Problems[0], want)
	})
	if !strings.Contains(st.Problems[0], "no space left on device") {
		t.Fatalf("problem does not say why: %q", st.Problems[0])
	}
	if n := len(callRecords(t, data)); n != 0 {
		t.Fatalf("%d records written on a full disk", n)
	}
	p.log.ContainsSince("call records cannot be written") // the log is written in batches
	logged := p.log.Since()
	if n := strings.Count(logged, "call records cannot be written"); n != 1 {
		t.Fatalf("%d error lines for %d failed records, want 1 (once a minute)", n, long+short)
	}
	if n := strings.Count(logged, "commit call record"); n != 0 {
		t.Fatalf("%d per-call error lines", n)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "status back to normal", 15*time.Second, func() bool {
		api.getJSON("/v1/status", &st)
		return !st.Degraded && len(st.Problems) == 0
	})
	_ = uas.wait()

	// Every call has its record exactly once: in the files, the index and
	// the API.
	for _, r := range recordsOnce(t, api, data, long+short) {
		if r["cause"] != "answered" || r["incomplete"] != false {
			t.Errorf("record %v: cause %v incomplete %v", r["id"], r["cause"], r["incomplete"])
		}
	}
	if n := countMarkers(data); n != 0 {
		t.Errorf("%d in-flight markers left", n)
	}
	if !p.log.ContainsSince("call records written after a write failure") {
		t.Error("no log line says the records were written")
	}
}

// recordsOnce checks that tenant demo has want records, each exactly once
// in the record files, the day indexes and the API's listing, and returns
// them.
func recordsOnce(t *testing.T, api apiClient, data string, want int) []map[string]any {
	t.Helper()
	recs := callRecords(t, data)
	ids := map[string]bool{}
	for _, r := range recs {
		id := fmt.Sprint(r["id"])
		if ids[id] {
			t.Errorf("record %s twice", id)
		}
		ids[id] = true
	}
	if len(ids) != want {
		t.Fatalf("%d records, want %d", len(ids), want)
	}
	lines := 0
	_ = filepath.WalkDir(filepath.Join(data, "demo", "cdr"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "index.jsonl" {
			return nil
		}
		for _, l := range readLines(t, path) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil || !ids[fmt.Sprint(m["id"])] {
				t.Errorf("index line %q: %v", l, err)
			}
			lines++
		}
		return nil
	})
	if lines != want {
		t.Errorf("index lines: %d, want %d", lines, want)
	}
	var page struct {
		Records []map[string]any `json:"records"`
	}
	api.getJSON("/v1/cdr?tenant=demo&limit=100", &page)
	listed := map[string]int{}
	for _, r := range page.Records {
		listed[fmt.Sprint(r["id"])]++
	}
	for id := range ids {
		if listed[id] != 1 {
			t.Errorf("record %s listed %d times", id, listed[id])
		}
	}
	if len(page.Records) != want {
		t.Errorf("API lists %d records, want %d", len(page.Records), want)
	}
	return recs
}

// TestChaosKillAfterLongCall: a call killed (SIGKILL) after it has lasted a
// while is recovered at the next start with an end and duration within the
// marker refresh interval of the moment the process died, not at its answer
// time.
func TestChaosKillAfterLongCall(t *testing.T) {
	const refresh = time.Second
	t.Setenv("PBX_TEST_CDR_MARKER_REFRESH", refresh.String())
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(mediaPort(t)), "-rtp_echo")
	caller := startSIPp(t, dir, "long", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "60000",
		"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(mediaPort(t)))

	inflight := filepath.Join(p.dataDir, "demo", "cdr", "inflight")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("caller:\n%s\nfull log:\n%s", caller.errors(dir), tail(p.log.String(), 40))
		}
	})
	var marker string
	waitFor(t, "call answered", 20*time.Second, func() bool {
		es, _ := os.ReadDir(inflight)
		for _, e := range es {
			if strings.HasSuffix(e.Name(), ".json") {
				marker = filepath.Join(inflight, e.Name())
				return true
			}
		}
		return false
	})
	var answered struct {
		Answer time.Time `json:"answer"`
	}
	b, err := os.ReadFile(marker)
	if err != nil || json.Unmarshal(b, &answered) != nil || answered.Answer.IsZero() {
		t.Fatalf("marker %s: %v %s", marker, err, b)
	}
	// The marker's time follows the call.
	const lasted = 6 * time.Second
	waitFor(t, "marker refreshed past the answer", 15*time.Second, func() bool {
		fi, err := os.Stat(marker)
		return err == nil && fi.ModTime().Sub(answered.Answer) >= lasted
	})
	p.kill()
	died := time.Now()
	_ = caller.cmd.Process.Kill()

	p.start() // recovery runs before the listeners open
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 {
		t.Fatalf("%d records after the restart, want 1", len(recs))
	}
	r := recs[0]
	var end, start time.Time
	if err := end.UnmarshalText([]byte(fmt.Sprint(r["end"]))); err != nil {
		t.Fatal(err)
	}
	if err := start.UnmarshalText([]byte(fmt.Sprint(r["start"]))); err != nil {
		t.Fatal(err)
	}
	if r["incomplete"] != true || r["cause"] != "incomplete" {
		t.Fatalf("recovered record: %v", r)
	}
	slack := 250 * time.Millisecond // the kill itself, and millisecond truncation
	if lag := died.Sub(end); lag < -slack || lag > refresh+slack {
		t.Fatalf("recovered end %v is %v before the kill at %v; want within %v", end, lag, died, refresh)
	}
	dur := time.Duration(r["duration_ms"].(float64)) * time.Millisecond
	truth := died.Sub(start)
	if d := truth - dur; d < -slack || d > refresh+slack {
		t.Fatalf("recovered duration %v, true duration %v", dur, truth)
	}
	t.Logf("recovered end %v before the kill, duration %v of %v (refresh every %v)", died.Sub(end), dur, truth, refresh)
	if bill := time.Duration(r["bill_ms"].(float64)) * time.Millisecond; bill < lasted {
		t.Fatalf("recovered bill %v, the call lasted at least %v after its answer", bill, lasted)
	}
}

// TestChaosKillOnFullDisk: a PBX killed while its data directory is full
// starts again on the still-full disk (recovery keeps what it cannot
// write), reports the recovered calls pending in /v1/status, and writes
// them once there is room: each call in progress at the kill has its
// incomplete record exactly once.
func TestChaosKillOnFullDisk(t *testing.T) {
	const live = 3
	data := mountTmpfs(t, 2<<20)
	t.Setenv("PBX_TEST_CDR_RETRY_MAX", "1s")
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, DataDir: data, LogLevel: "info"})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", strconv.Itoa(live),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(mediaPort(t)), "-rtp_echo")
	caller := startSIPp(t, dir, "long", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", strconv.Itoa(live), "-l", strconv.Itoa(live), "-r", "20", "-d", "60000",
		"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(mediaPort(t)))
	waitFor(t, "calls answered", 30*time.Second, func() bool { return countMarkers(data) == live })
	filler := filepath.Join(data, "filler")
	fill(t, filler)
	p.kill()
	_ = caller.cmd.Process.Kill()

	p.start() // on the full disk
	var st statusBody
	want := fmt.Sprintf("call records: %d pending", live)
	waitFor(t, "status degraded with the recovered calls pending", 10*time.Second, func() bool {
		api.getJSON("/v1/status", &st)
		return st.Degraded && len(st.Problems) == 1 && strings.HasPrefix(st.Problems[0], want)
	})
	if n := countMarkers(data); n != live {
		t.Fatalf("%d markers on disk while their records are pending, want %d", n, live)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "status back to normal", 15*time.Second, func() bool {
		api.getJSON("/v1/status", &st)
		return !st.Degraded && len(st.Problems) == 0
	})
	p.stop()
	p.start() // a second recovery finds nothing to do
	p.stop()
	recs := callRecords(t, data)
	ids := map[string]bool{}
	for _, r := range recs {
		id := fmt.Sprint(r["id"])
		if ids[id] || r["incomplete"] != true {
			t.Errorf("record %s: twice or not incomplete: %v", id, r)
		}
		ids[id] = true
	}
	if len(ids) != live {
		t.Fatalf("%d records, want %d", len(ids), live)
	}
	if n := countMarkers(data); n != 0 {
		t.Errorf("%d markers left", n)
	}
}
