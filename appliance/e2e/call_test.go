package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// credentials is a SIPp injection file line: user, domain, auth keyword.
func credentials(users ...string) string {
	var b strings.Builder
	b.WriteString("SEQUENTIAL\n")
	for _, u := range users {
		fmt.Fprintf(&b, "%s;127.0.0.1;[authentication username=%s password=%s-secret]\n", u, u, u)
	}
	return b.String()
}

func transportFlag(transport string) string {
	if transport == "tcp" {
		return "t1"
	}
	return "u1"
}

// registerSIPp registers user from local port port with digest authentication.
func registerSIPp(t *testing.T, p *pbxProc, dir, transport, user string, port int) {
	t.Helper()
	r := startSIPp(t, dir, "register-"+user, 30*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "register.xml", "-inf", user+".csv",
		"-m", "1", "-p", strconv.Itoa(port), "-i", "127.0.0.1", "-t", transportFlag(transport))
	if code := r.wait(); code != 0 {
		t.Fatalf("register %s over %s: sipp exit %d\n%s\npbx log:\n%s", user, transport, code, r.errors(dir), tail(p.log.String(), 30))
	}
}

// callRecords reads every committed record of tenant demo.
func callRecords(t *testing.T, dataDir string) []map[string]any {
	t.Helper()
	return recordsOf(t, dataDir, "demo")
}

// TestCallBetweenExtensions: SIPp registers bob (101) with digest, a SIPp UAS answers
// on bob's contact, and SIPp as alice (100) calls 101 with digest and plays RTP, over
// UDP and over TCP. Media flows through the PBX and the call leaves a record.
func TestCallBetweenExtensions(t *testing.T) {
	for _, transport := range []string{"udp", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			p, recs := sippCall(t, transport, "uac_call.xml")
			r := recs[0]
			if r["cause"] != "answered" || r["answered_by"] != "101" || r["direction"] != "internal" || r["answer"] == nil {
				t.Errorf("record: %v", r)
			}
			if bill, _ := r["bill_ms"].(float64); bill < 2500 {
				t.Errorf("bill_ms %v, want about 3500", r["bill_ms"])
			}
			assertMediaRelayed(t, p, 100)
		})
	}
}

// sippCall runs one call over transport through a fresh PBX: SIPp registers
// bob (101) and answers on his contact echoing RTP, and SIPp as alice calls
// 101 with digest through the uac scenario for 3.5 s. It returns the stopped
// PBX and the one call record it left.
func sippCall(t *testing.T, transport, scenario string) (*pbxProc, []map[string]any) {
	t.Helper()
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, transport, "bob", bobPort)

	uasMedia, uacMedia := freePort(t), freePort(t)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(uasMedia), "-rtp_echo",
		"-t", transportFlag(transport))
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", scenario, "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "3500", "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(uacMedia), "-t", transportFlag(transport))
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s\npbx log:\n%s", code, uac.errors(dir), tail(p.log.String(), 40))
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 {
		t.Fatalf("want 1 call record, got %d", len(recs))
	}
	return p, recs
}

// assertMediaRelayed checks the PBX's end-of-call media counters: both legs
// received at least min packets (the caller's pcap and the callee's echo of it).
func assertMediaRelayed(t *testing.T, p *pbxProc, min int) {
	t.Helper()
	p.log.Contains("media stats") // the log is written in batches: let the call's lines arrive
	for _, line := range strings.Split(p.log.String(), "\n") {
		if !strings.Contains(line, "media stats") {
			continue
		}
		in := map[string]int{}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			if strings.HasSuffix(k, "packets_in") {
				n, _ := strconv.Atoi(v)
				in[k] = n
			}
		}
		if len(in) < 2 {
			t.Fatalf("media stats line lacks per-leg counters: %s", line)
		}
		for k, n := range in {
			if n < min {
				t.Errorf("%s = %d, want at least %d (%s)", k, n, min, line)
			}
		}
		return
	}
	t.Fatalf("no media stats line in the pbx log:\n%s", tail(p.log.String(), 30))
}
