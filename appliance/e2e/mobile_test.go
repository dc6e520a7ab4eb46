package e2e

import (
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/appliance/webhook"
)

const mobileOperator = "e2e-mobile-operator-0123456789abcdefgh"

// deviceCall makes one HTTP request to the device API with an optional
// bearer token and JSON body.
func deviceCall(t *testing.T, p *pbxProc, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", p.apiPort, path), rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m
}

func deviceLogin(t *testing.T, p *pbxProc, user, password, device string) string {
	t.Helper()
	code, m := deviceCall(t, p, "POST", "/v1/mobile/login", "", fmt.Sprintf(
		`{"domain":"127.0.0.1","username":%q,"password":%q,"device":{"id":%q,"platform":"ios","push":{"apns":"x"}}}`, user, password, device))
	if code != 200 {
		t.Fatalf("login %s: %d %v", user, code, m)
	}
	return m["token"].(string)
}

// TestDeviceSessionsAcrossRestarts: device tokens survive a restart, an
// operator's DELETE revokes at once, and a password change in the
// configuration ends the account's sessions at the next start.
func TestDeviceSessionsAcrossRestarts(t *testing.T) {
	p := startPBX(t, pbxConfig{APIPort: freePort(t), Tokens: "      - name: mobile-ops\n        token: " + mobileOperator +
		"\n        scopes: [mobile:read, mobile:manage]\n"})
	alice := deviceLogin(t, p, "alice", "alice-secret", "alice-phone")
	bob := deviceLogin(t, p, "bob", "bob-secret", "bob-phone")
	if code, m := deviceCall(t, p, "GET", "/v1/mobile/me", alice, ""); code != 200 || m["account"].(map[string]any)["extension"] != "100" {
		t.Fatalf("me: %d %v", code, m)
	}
	if code, _ := deviceCall(t, p, "POST", "/v1/mobile/login", "",
		`{"domain":"127.0.0.1","username":"alice","password":"wrong","device":{"id":"x","platform":"ios"}}`); code != 401 {
		t.Fatalf("wrong password: %d", code)
	}
	p.stop()
	p.start()
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", alice, ""); code != 200 {
		t.Fatalf("token after a restart: %d", code)
	}
	if code, m := deviceCall(t, p, "GET", "/v1/mobile/devices", mobileOperator, ""); code != 200 || len(m["devices"].([]any)) != 2 {
		t.Fatalf("operator list: %d %v", code, m)
	}
	if code, _ := deviceCall(t, p, "DELETE", "/v1/mobile/devices/demo/bob-phone", mobileOperator, ""); code != 204 {
		t.Fatalf("operator delete: %d", code)
	}
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", bob, ""); code != 401 {
		t.Fatalf("revoked token: %d", code)
	}
	if !p.log.Contains(`mobile.device.revoke`) {
		t.Fatal("revocation not audited")
	}
	p.stop()
	cfgPath := filepath.Join(p.dir, "pbx.yaml")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(b), "password: alice-secret", "password: alice-new-secret", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", alice, ""); code != 401 {
		t.Fatalf("token after a password change: %d", code)
	}
	p.waitLog("device sessions invalidated at start", 5*time.Second)
}

// hookReceiver is the tenant's backend on a real socket: it verifies each
// signature and answers 503 until up is set.
type hookReceiver struct {
	t   *testing.T
	up  atomic.Bool
	mu  sync.Mutex
	ids []string
	ok  []string // delivery ids answered 2xx
	rec string   // data.id of the last delivery
	srv *http.Server
	url string
}

func newHookReceiver(t *testing.T) *hookReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hookReceiver{t: t, url: "http://" + ln.Addr().String() + "/hook"}
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !hmac.Equal([]byte(r.Header.Get("X-Pbx-Signature")), []byte(webhook.Sign([]byte("hook-secret"), r.Header.Get("X-Pbx-Timestamp"), body))) {
			t.Errorf("bad signature on %s", body)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil || m["event"] != "call.ended" || m["id"] != r.Header.Get("X-Pbx-Delivery") {
			t.Errorf("delivery %s", body)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		id := r.Header.Get("X-Pbx-Delivery")
		h.ids = append(h.ids, id)
		if data, ok := m["data"].(map[string]any); ok {
			h.rec, _ = data["id"].(string)
		}
		if !h.up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		h.ok = append(h.ok, id)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = h.srv.Serve(ln) }()
	t.Cleanup(func() { _ = h.srv.Close() })
	return h
}

func (h *hookReceiver) counts() (all, ok int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids), len(h.ok)
}

// TestCallEndedWebhookSurvivesKill: a call's call.ended delivery that a
// failing backend refused is still delivered, with the same delivery id,
// after a SIGKILL and a restart, once; the outbox is then empty.
func TestCallEndedWebhookSurvivesKill(t *testing.T) {
	rcv := newHookReceiver(t)
	p := startPBX(t, pbxConfig{Extra: fmt.Sprintf(`---
configVersion: pbx/v1
kind: Webhook
metadata: {name: crm, tenant: demo}
spec:
  url: %s
  events: [call.ended]
  secret: hook-secret
`, rcv.url)})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "500", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
	uas.wait()
	waitFor(t, "a refused attempt", 15*time.Second, func() bool { n, _ := rcv.counts(); return n >= 1 })
	pending := filepath.Join(p.dataDir, "webhooks", "pending")
	if es, _ := os.ReadDir(pending); len(es) != 1 {
		t.Fatalf("%d job files after a refused attempt", len(es))
	}
	p.kill()
	rcv.up.Store(true)
	p.start()
	waitFor(t, "the delivery after the restart", 15*time.Second, func() bool { _, ok := rcv.counts(); return ok == 1 })
	rcv.mu.Lock()
	first, last := rcv.ids[0], rcv.ok[0]
	rcv.mu.Unlock()
	if first != last {
		t.Fatalf("delivery id changed across the crash: %s then %s", first, last)
	}
	waitFor(t, "an empty outbox", 5*time.Second, func() bool { es, _ := os.ReadDir(pending); return len(es) == 0 })
	p.stop()
	p.start()
	p.stop()
	if _, ok := rcv.counts(); ok != 1 {
		t.Fatalf("a confirmed delivery was sent %d times", ok)
	}
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 || recs[0]["id"] != rcv.rec {
		t.Fatalf("delivered record %q; call log %v", rcv.rec, recs)
	}
}
