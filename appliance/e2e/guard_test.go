package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// guardSecurity turns the guard on with loopback untrusted, since every
// attacker and phone of these tests is on 127.0.0.0/8.
const guardSecurity = `  security:
    enabled: true
    trustLoopback: false
    authFailures: 5
    authWindow: 10m
    banDuration: 10m
`

type banList struct {
	Bans []struct {
		IP       string    `json:"ip"`
		Reason   string    `json:"reason"`
		Since    time.Time `json:"since"`
		Until    time.Time `json:"until"`
		Offences int       `json:"offences"`
	} `json:"bans"`
}

type guardCounters struct {
	Packets      uint64 `json:"packets"`
	Dropped      uint64 `json:"dropped"`
	Banned       uint64 `json:"banned"`
	RateLimited  uint64 `json:"rate_limited"`
	AuthFailures uint64 `json:"auth_failures"`
	BansActive   int    `json:"bans_active"`
	Tracked      int    `json:"tracked"`
}

// wrongPasswords is an injection file of n password guesses for alice.
func wrongPasswords(n int) string {
	var b strings.Builder
	b.WriteString("SEQUENTIAL\n")
	for i := range n {
		fmt.Fprintf(&b, "alice;127.0.0.1;[authentication username=alice password=guess%03d]\n", i)
	}
	return b.String()
}

func startGuardedPBX(t *testing.T) (*pbxProc, apiClient) {
	t.Helper()
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, Security: guardSecurity, NoCDR: true, LogLevel: "info"})
	return p, apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
}

// TestGuardBansSIPpBruteForce: SIPp guesses alice's password from 127.0.0.2;
// after 5 refusals the source is banned and hears nothing more, the ban is
// listed by the API while a phone on 127.0.0.3 still registers, and lifting
// the ban through the API lets 127.0.0.2 register again.
func TestGuardBansSIPpBruteForce(t *testing.T) {
	p, api := startGuardedPBX(t)
	dir := scenarioDir(t, map[string]string{
		"guesses.csv": wrongPasswords(8),
		"alice.csv":   credentials("alice"),
	})
	target := fmt.Sprintf("127.0.0.1:%d", p.sipPort)

	// One guess at a time; a guess the PBX no longer answers fails after 2s.
	r := startSIPp(t, dir, "crack", 60*time.Second, target, "-sf", "register_wrong.xml", "-inf", "guesses.csv",
		"-m", "8", "-l", "1", "-i", "127.0.0.2", "-p", strconv.Itoa(freePort(t)), "-recv_timeout", "2000", "-max_retrans", "2")
	code := r.wait()
	if code == 0 {
		t.Fatalf("every guess was answered: the source was never banned\n%s", r.errors(dir))
	}

	var bans banList
	api.getJSON("/v1/security/bans", &bans)
	if len(bans.Bans) != 1 || bans.Bans[0].IP != "127.0.0.2" || bans.Bans[0].Offences != 1 ||
		bans.Bans[0].Until.Sub(bans.Bans[0].Since) != 10*time.Minute || bans.Bans[0].Reason == "" {
		t.Fatalf("bans %+v, want 127.0.0.2 banned for 10m (first offence)", bans)
	}
	var c guardCounters
	api.getJSON("/v1/security/counters", &c)
	// Exactly 5 guesses reached the registrar; the rest were dropped before it.
	if c.AuthFailures != 5 || c.Banned == 0 || c.BansActive != 1 || c.Dropped < c.Banned {
		t.Fatalf("counters %+v, want 5 auth failures, banned packets and one active ban", c)
	}
	if !p.log.Contains(`msg="source banned"`) {
		t.Fatal("no log line for the ban")
	}

	// Another source is served while 127.0.0.2 is banned.
	reg := startSIPp(t, dir, "register-other", 30*time.Second, target, "-sf", "register.xml", "-inf", "alice.csv",
		"-m", "1", "-i", "127.0.0.3", "-p", strconv.Itoa(freePort(t)))
	if code := reg.wait(); code != 0 {
		t.Fatalf("register from 127.0.0.3 during the ban: sipp exit %d\n%s", code, reg.errors(dir))
	}
	// The banned source is not, even with the right password.
	banned := startSIPp(t, dir, "register-banned", 30*time.Second, target, "-sf", "register.xml", "-inf", "alice.csv",
		"-m", "1", "-i", "127.0.0.2", "-p", strconv.Itoa(freePort(t)), "-recv_timeout", "2000", "-max_retrans", "2")
	if code := banned.wait(); code == 0 {
		t.Fatal("banned source registered")
	}

	if code, body := api.do("DELETE", "/v1/security/bans/127.0.0.2"); code != 204 {
		t.Fatalf("DELETE ban: %d %s", code, body)
	}
	api.getJSON("/v1/security/bans", &bans)
	if len(bans.Bans) != 0 {
		t.Fatalf("bans after lift: %+v", bans)
	}
	if code, body := api.do("DELETE", "/v1/security/bans/127.0.0.2"); code != 404 {
		t.Fatalf("second DELETE: %d %s, want 404", code, body)
	}
	lifted := startSIPp(t, dir, "register-lifted", 30*time.Second, target, "-sf", "register.xml", "-inf", "alice.csv",
		"-m", "1", "-i", "127.0.0.2", "-p", strconv.Itoa(freePort(t)))
	if code := lifted.wait(); code != 0 {
		t.Fatalf("register from 127.0.0.2 after lift: sipp exit %d\n%s", code, lifted.errors(dir))
	}
	if !p.log.Contains(`msg="ban lifted"`) {
		t.Fatal("no log line for the lift")
	}
}

// requireSvcrack fails (never skips) when sipvicious is missing.
func requireSvcrack(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("svcrack")
	if err != nil {
		t.Fatal("svcrack is not installed: apt-get install sipvicious")
	}
	return p
}

// TestGuardStopsSvcrack: sipvicious's svcrack, the scanner operators meet in
// the wild, cracks alice's password from a dictionary whose last entry is
// right. The guard bans it after 5 wrong guesses, so it finds nothing; once
// the ban is lifted it is heard again. svcrack 0.3.3 ignores its binding
// address (-b), so it sends from 127.0.0.1; the API is HTTP and unaffected.
func TestGuardStopsSvcrack(t *testing.T) {
	bin := requireSvcrack(t)
	p, api := startGuardedPBX(t)
	dir := t.TempDir()
	for name, words := range map[string]string{
		"dict.txt":  "guess1\nguess2\nguess3\nguess4\nguess5\nguess6\nguess7\nalice-secret\n",
		"short.txt": "guess8\nalice-secret\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(words), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	crack := func(dict string) string {
		t.Helper()
		out, _ := exec.Command("timeout", "60", bin, "-u", "alice", "-d", filepath.Join(dir, dict), "--domain", "127.0.0.1",
			"-p", strconv.Itoa(p.sipPort), "--maximumtime", "3", "127.0.0.1").CombinedOutput()
		return string(out)
	}

	out := crack("dict.txt")
	if strings.Contains(out, "alice-secret") {
		t.Fatalf("svcrack found the password through the guard:\n%s", out)
	}
	var bans banList
	api.getJSON("/v1/security/bans", &bans)
	if len(bans.Bans) != 1 || bans.Bans[0].IP != "127.0.0.1" {
		t.Fatalf("bans %+v, want svcrack's 127.0.0.1\nsvcrack:\n%s", bans, out)
	}
	var c guardCounters
	api.getJSON("/v1/security/counters", &c)
	if c.AuthFailures != 5 || c.Banned == 0 {
		t.Fatalf("counters %+v, want 5 failures and svcrack's later packets dropped as banned", c)
	}

	if code, body := api.do("DELETE", "/v1/security/bans/127.0.0.1"); code != 204 {
		t.Fatalf("DELETE ban: %d %s", code, body)
	}
	// Heard again: one more wrong guess, then the right password.
	if out := crack("short.txt"); !strings.Contains(out, "alice-secret") {
		t.Fatalf("after lift svcrack did not get through:\n%s", out)
	}
}

// TestGuardOffStillCounts: with no security block the guard admits
// everything, lists no bans and still counts packets.
func TestGuardOffStillCounts(t *testing.T) {
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, NoCDR: true, LogLevel: "info"})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := scenarioDir(t, map[string]string{"guesses.csv": wrongPasswords(8)})
	r := startSIPp(t, dir, "crack", 60*time.Second, fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "register_wrong.xml",
		"-inf", "guesses.csv", "-m", "8", "-l", "1", "-i", "127.0.0.2", "-p", strconv.Itoa(freePort(t)))
	if code := r.wait(); code != 0 {
		t.Fatalf("with the guard off every guess must be answered 403: sipp exit %d\n%s", code, r.errors(dir))
	}
	code, body := api.do("GET", "/v1/security/bans")
	if code != 200 || strings.TrimSpace(string(body)) != `{"bans":[]}` {
		t.Fatalf("GET bans: %d %s, want an empty list", code, body)
	}
	var c guardCounters
	api.getJSON("/v1/security/counters", &c)
	// 8 guesses of 2 REGISTERs each, at least, reached the PBX.
	if c.Packets < 16 || c.Dropped != 0 || c.AuthFailures != 8 || c.BansActive != 0 || c.Tracked != 0 {
		t.Fatalf("counters %+v, want packets and failures counted and nothing dropped, tracked or banned", c)
	}
}
