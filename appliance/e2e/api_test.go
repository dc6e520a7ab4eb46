package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// apiClient speaks to the running PBX's management API.
type apiClient struct {
	t     *testing.T
	base  string
	token string
}

func (c apiClient) do(method, path string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func (c apiClient) getJSON(path string, v any) {
	c.t.Helper()
	code, b := c.do("GET", path)
	if code != 200 {
		c.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		c.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

type callList struct {
	Calls []struct {
		ID     string `json:"id"`
		Tenant string `json:"tenant"`
		State  string `json:"state"`
		From   string `json:"from"`
		To     string `json:"to"`
	} `json:"calls"`
}

// TestAPIOperatesTheLivePBX: /v1/calls lists SIPp calls in progress, a hang-up ends
// one (SIPp sees the BYE), dropping a registration makes the extension unreachable,
// and a SIGHUP with a broken token keeps the old tokens working.
func TestAPIOperatesTheLivePBX(t *testing.T) {
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)

	var regs struct {
		Registrations []struct{ Tenant, Extension, Username string } `json:"registrations"`
	}
	api.getJSON("/v1/registrations?tenant=demo&online=true", &regs)
	if len(regs.Registrations) != 1 || regs.Registrations[0].Extension != "101" {
		t.Fatalf("registrations: %+v", regs)
	}
	// The status counts the live bindings (per tenant, without listing them).
	var st struct {
		Registrations int `json:"registrations"`
	}
	api.getJSON("/v1/status", &st)
	if st.Registrations != 1 {
		t.Fatalf("status registrations %d, want 1", st.Registrations)
	}

	uas := startSIPp(t, dir, "uas", 90*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "2",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	time.Sleep(300 * time.Millisecond)
	uac := startSIPp(t, dir, "uac", 90*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_hungup.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "2", "-l", "2", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))

	var calls callList
	waitFor(t, "two answered calls in /v1/calls", 30*time.Second, func() bool {
		api.getJSON("/v1/calls", &calls)
		n := 0
		for _, c := range calls.Calls {
			if c.State == "answered" {
				n++
			}
		}
		return n == 2
	})
	first := calls.Calls[0].ID
	if code, b := api.do("POST", "/v1/calls/"+first+"/hangup"); code != http.StatusAccepted {
		t.Fatalf("hangup: %d %s", code, b)
	}
	waitFor(t, "one call left", 15*time.Second, func() bool {
		api.getJSON("/v1/calls", &calls)
		return len(calls.Calls) == 1 && calls.Calls[0].ID != first
	})
	if code, _ := api.do("POST", "/v1/calls/"+first+"/hangup"); code != http.StatusNotFound {
		t.Errorf("hangup of an ended call: %d, want 404", code)
	}
	if code, b := api.do("POST", "/v1/calls/"+calls.Calls[0].ID+"/hangup"); code != http.StatusAccepted {
		t.Fatalf("hangup: %d %s", code, b)
	}
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller did not see both BYEs: sipp exit %d\n%s", code, uac.errors(dir))
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}

	// Dropping the registration makes 101 unreachable: the next call is refused 480.
	if code, b := api.do("DELETE", "/v1/registrations/demo/101"); code != http.StatusNoContent {
		t.Fatalf("drop registration: %d %s", code, b)
	}
	api.getJSON("/v1/registrations?tenant=demo&online=true", &regs)
	if len(regs.Registrations) != 0 {
		t.Fatalf("registrations after drop: %+v", regs)
	}
	refused := startSIPp(t, dir, "refused", 30*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := refused.wait(); code == 0 {
		t.Fatal("a call to a dropped extension succeeded")
	}
	var page struct {
		Records []map[string]any `json:"records"`
	}
	waitFor(t, "the refused call's record", 10*time.Second, func() bool {
		api.getJSON("/v1/cdr?tenant=demo&limit=1", &page)
		return len(page.Records) == 1 && page.Records[0]["answered"] == false
	})
	var rec map[string]any
	api.getJSON("/v1/cdr/demo/"+page.Records[0]["id"].(string), &rec)
	if rec["sip_status"] != float64(480) {
		t.Errorf("refused call record: %v", rec)
	}

	// A SIGHUP with a broken token set keeps the running tokens.
	cfgPath := filepath.Join(p.dir, "pbx.yaml")
	orig, _ := os.ReadFile(cfgPath)
	broken := strings.Replace(string(orig), "token: "+testToken, "token: too-short", 1)
	if err := os.WriteFile(cfgPath, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("reload refused", 10*time.Second)
	if code, _ := api.do("GET", "/v1/status"); code != 200 {
		t.Fatalf("old token after a refused reload: %d", code)
	}
	// A good new set replaces it: the new token works, the old one no longer.
	const newToken = "e2e-rotated-token-0123456789abcdefghij"
	rotated := strings.Replace(string(orig), "token: "+testToken, "token: "+newToken, 1)
	if err := os.WriteFile(cfgPath, []byte(rotated), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("reloaded API credentials", 10*time.Second)
	if code, _ := api.do("GET", "/v1/status"); code != http.StatusUnauthorized {
		t.Errorf("old token after rotation: %d, want 401", code)
	}
	api.token = newToken
	if code, b := api.do("GET", "/v1/status"); code != 200 {
		t.Errorf("new token: %d %s", code, b)
	}
}
