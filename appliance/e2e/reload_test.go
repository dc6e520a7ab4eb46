package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const rotatedToken = "e2e-rotated-token-0123456789abcdefghij"

// rewriteConfig replaces old with new in the PBX's configuration file.
func rewriteConfig(t *testing.T, p *pbxProc, old, new string) {
	t.Helper()
	path := filepath.Join(p.dir, "pbx.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("configuration lacks %q", old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReloadUnderLoad: with 100 calls up through the PBX, a SIGHUP rotates
// the API token: the new token works at once, the old one is refused, and
// no call is dropped: every call ends with the caller's BYE after its full
// hold, SIPp reports no failed call, and each leaves an answered record.
func TestReloadUnderLoad(t *testing.T) {
	const calls = 100
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)

	uas := startSIPpLoad(t, dir, "uas", 2*time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", strconv.Itoa(calls),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	waitUDPBound(t, bobPort)
	// No RTP: the calls stay up on signalling alone (the media timeout is 60s).
	uac := startSIPpLoad(t, dir, "uac", 2*time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "bench_uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-r", "50", "-m", strconv.Itoa(calls), "-l", strconv.Itoa(calls), "-d", "15000", "-recv_timeout", "10000",
		"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")

	answered := func() int {
		var list callList
		api.getJSON("/v1/calls", &list)
		n := 0
		for _, c := range list.Calls {
			if c.State == "answered" {
				n++
			}
		}
		return n
	}
	waitFor(t, "every call answered", 30*time.Second, func() bool { return answered() == calls })

	rewriteConfig(t, p, "token: "+testToken, "token: "+rotatedToken)
	p.log.mark()
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("reloaded API credentials", 10*time.Second)
	if code, _ := api.do("GET", "/v1/status"); code != http.StatusUnauthorized {
		t.Errorf("old token after rotation: %d, want 401", code)
	}
	api.token = rotatedToken
	if n := answered(); n != calls {
		t.Errorf("%d calls up right after the reload, want %d", n, calls)
	}

	if code := uac.wait(); code != 0 {
		t.Errorf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
	if s := uac.stats(t, dir); s.OK != calls || s.Failed != 0 {
		t.Errorf("caller: %d calls completed, %d failed; want %d and 0", s.OK, s.Failed, calls)
	}
	if code := uas.wait(); code != 0 {
		t.Errorf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
	p.stop()
	recs := callRecords(t, p.dataDir)
	ok := 0
	for _, r := range recs {
		if r["cause"] == "answered" {
			ok++
		}
	}
	if len(recs) != calls || ok != calls {
		t.Errorf("%d records, %d answered; want %d answered", len(recs), ok, calls)
	}
	// Every line of 100 calls at debug level has one value per key.
	assertNoDuplicateKeys(t, p.log.String())
}

// TestReloadRefusesTurningTheAPIOff: a SIGHUP whose files set api.enabled:
// false is refused with a log line that says why, never reported as
// reloaded, and the running token keeps working (issue 14, item 5).
func TestReloadRefusesTurningTheAPIOff(t *testing.T) {
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, LogLevel: "info"})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}

	rewriteConfig(t, p, "api:\n    enabled: true", "api:\n    enabled: false")
	p.log.mark()
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("reload refused", 10*time.Second)
	out := p.log.Since()
	if !strings.Contains(out, "api.enabled: false") || !strings.Contains(out, "restart") {
		t.Errorf("the refusal does not say why:\n%s", out)
	}
	if strings.Contains(out, "reloaded API credentials") {
		t.Errorf("a refused reload was reported as done:\n%s", out)
	}
	if code, b := api.do("GET", "/v1/status"); code != 200 {
		t.Errorf("running token after the refused reload: %d %s", code, b)
	}
}

// TestReloadWithoutAPI: a SIGHUP to a PBX whose API is off says that
// nothing was reloaded instead of reporting credentials reloaded.
func TestReloadWithoutAPI(t *testing.T) {
	p := startPBX(t, pbxConfig{NoCDR: true, LogLevel: "info"})
	p.log.mark()
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("nothing to reload", 10*time.Second)
	if out := p.log.Since(); strings.Contains(out, "reloaded API credentials") || !strings.Contains(out, "level=WARN") {
		t.Errorf("reload without an API:\n%s", out)
	}
}

// waitUDPBound polls until something listens on UDP port (binding it fails).
func waitUDPBound(t *testing.T, port int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a listener on udp port %d", port), 10*time.Second, func() bool {
		c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}
