package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKillDuringCalls: calls that ended before a SIGKILL are each present exactly
// once afterwards; the 50 calls that were answered when the process died are each a
// record with incomplete: true after the restart; every index line parses.
func TestKillDuringCalls(t *testing.T) {
	const done, live = 10, 50
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 120*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", strconv.Itoa(done+live),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	_ = uas
	time.Sleep(300 * time.Millisecond)
	call := func(name string, n int, hold time.Duration) *sippRun {
		return startSIPp(t, dir, name, 120*time.Second,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
			"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
			"-m", strconv.Itoa(n), "-l", strconv.Itoa(n), "-r", "20", "-d", strconv.Itoa(int(hold/time.Millisecond)),
			"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	}
	short := call("short", done, 300*time.Millisecond)
	if code := short.wait(); code != 0 {
		t.Fatalf("short calls: sipp exit %d\n%s", code, short.errors(dir))
	}
	waitFor(t, "short calls committed", 20*time.Second, func() bool { return len(callRecords(t, p.dataDir)) == done })

	long := call("long", live, 5*time.Minute)
	inflight := filepath.Join(p.dataDir, "demo", "cdr", "inflight")
	markers := func() int {
		es, _ := os.ReadDir(inflight)
		n := 0
		for _, e := range es {
			if strings.HasSuffix(e.Name(), ".json") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for markers() != live {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls answered after 60s\ncaller:\n%s\npbx log:\n%s", markers(), live, long.errors(dir), tail(p.log.String(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.kill()
	_ = long.cmd.Process.Kill()
	before := len(callRecords(t, p.dataDir))
	if before != done {
		t.Fatalf("before restart: %d committed records, want %d", before, done)
	}

	p.start() // recovery runs before the listeners open
	p.stop()

	recs := callRecords(t, p.dataDir)
	ids := map[string]int{}
	incomplete, complete := 0, 0
	for _, r := range recs {
		ids[r["id"].(string)]++
		if r["incomplete"] == true {
			incomplete++
			if r["cause"] != "incomplete" || r["answer"] == nil || r["end"] == nil {
				t.Errorf("recovered record: %v", r)
			}
		} else {
			complete++
			if r["cause"] != "answered" {
				t.Errorf("committed record: %v", r)
			}
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("record %s present %d times", id, n)
		}
	}
	if complete != done || incomplete != live {
		t.Fatalf("after restart: %d complete (want %d), %d incomplete (want %d)", complete, done, incomplete, live)
	}
	es, _ := os.ReadDir(inflight)
	if len(es) != 0 {
		t.Errorf("%d markers left in %s", len(es), inflight)
	}
	// Every index line parses, and the index lists every record once.
	lines := 0
	_ = filepath.WalkDir(filepath.Join(p.dataDir, "demo", "cdr"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "index.jsonl" {
			return nil
		}
		for _, l := range readLines(t, path) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Errorf("%s: unparsable index line %q: %v", path, l, err)
			}
			lines++
		}
		return nil
	})
	if lines != done+live {
		t.Errorf("index lines: %d, want %d", lines, done+live)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond) // also keeps API polling under the token's rate limit
	}
}
