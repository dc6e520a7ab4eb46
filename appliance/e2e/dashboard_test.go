package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const dashAcmeToken = "e2e-dashboard-acme-token-0123456789ab"

// requireChromium fails (never skips) when Debian's chromium is missing.
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed: run `make test-deps` (apt-get install chromium)")
	return ""
}

// browser starts headless Chromium with the flags this closed network needs
// and returns a tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	chromium := requireChromium(t)
	// Chromium's helpers may still write to the profile for a moment after
	// the browser is stopped: remove it (after the stop, cleanups run last
	// first) until that succeeds, rather than with t.TempDir.
	profile, err := os.MkdirTemp("", "pbx-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("chromium profile %s not removed", profile)
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser actions, bounded by d.
func run(t *testing.T, ctx context.Context, d time.Duration, what string, actions ...chromedp.Action) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Run(tctx, actions...); err != nil {
		var page string
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		derr := chromedp.Run(dctx, chromedp.Evaluate(`document.body.innerText.slice(0, 3000)`, &page))
		t.Fatalf("%s: %v\npage (%v):\n%s", what, err, derr, page)
	}
}

// until polls a JavaScript expression in the page until it is true.
func until(expr string) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingInterval(20*time.Millisecond))
}

func connect(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	run(t, ctx, 15*time.Second, "open the dashboard and connect",
		chromedp.Navigate(base+"/v1/dashboard"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", token, chromedp.ByID),
		chromedp.Click(`#login button[type="submit"]`, chromedp.ByQuery),
		until(`document.getElementById('status').textContent === 'Live.'`),
	)
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	run(t, ctx, 10*time.Second, "screenshot", chromedp.FullScreenshot(&png, 100))
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestDashboardInBrowser: headless Chromium opens the dashboard, takes a
// token, and shows a registration, a SIPp call within a second of the API
// listing it, and a ban; the hang-up button ends the call (SIPp sees the
// BYE) and the lift button lifts the ban. A tenant's token sees only its
// tenant, and a wrong token gets a clear message.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser(t)
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, Security: guardSecurity, LogLevel: "info",
		Tokens: fmt.Sprintf("      - name: acme\n        token: %s\n        scopes: [status:read, operate]\n        tenants: [acme]\n", dashAcmeToken),
		Extra: `---
configVersion: pbx/v1
kind: Tenant
metadata: {name: acme}
spec:
  domain: acme.example
---
configVersion: pbx/v1
kind: Account
metadata: {name: zed, tenant: acme}
spec:
  password: zed-secret
  extension: "200"
`})
	base := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	api := apiClient{t: t, base: base, token: testToken}
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice"), "guesses.csv": wrongPasswords(8)})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)

	connect(t, ctx, base, testToken)
	run(t, ctx, 5*time.Second, "bob's registration shown",
		until(`[...document.querySelectorAll('#registrations tbody tr')].some(r => r.textContent.includes('bob'))`))

	uas := startSIPp(t, dir, "uas", 60*time.Second, fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	time.Sleep(300 * time.Millisecond)
	uac := startSIPp(t, dir, "uac", 60*time.Second, fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_hungup.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort), "-m", "1", "-l", "1",
		"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	var calls callList
	waitFor(t, "the call answered in /v1/calls", 20*time.Second, func() bool {
		api.getJSON("/v1/calls", &calls)
		return len(calls.Calls) == 1 && calls.Calls[0].State == "answered"
	})
	listed := time.Now()
	id := calls.Calls[0].ID
	row := fmt.Sprintf(`#calls tbody tr[data-id=%q]`, id)
	run(t, ctx, 5*time.Second, "the call shown", until(fmt.Sprintf(`document.querySelector('%s td.state-answered') !== null`, row)))
	if d := time.Since(listed); d > time.Second {
		t.Errorf("the dashboard showed the answered call %v after the API listed it; want within 1s", d)
	}
	var durationText string
	run(t, ctx, 5*time.Second, "duration ticks",
		until(fmt.Sprintf(`document.querySelector('%s td.duration').textContent !== '0:00'`, row)),
		chromedp.Text(row+" td.duration", &durationText, chromedp.ByQuery))
	screenshot(t, ctx, "dashboard-call.png")

	run(t, ctx, 5*time.Second, "hang up from the page", chromedp.Click(row+" button", chromedp.ByQuery))
	if code := uac.wait(); code != 0 {
		t.Fatalf("the caller did not get the BYE: sipp exit %d\n%s", code, uac.errors(dir))
	}
	uas.wait()
	run(t, ctx, 5*time.Second, "the call leaves the page", until(fmt.Sprintf(`document.querySelector('%s') === null`, row)))

	checkMetrics(t, api)

	crack := startSIPp(t, dir, "crack", 60*time.Second, fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "register_wrong.xml", "-inf", "guesses.csv",
		"-m", "8", "-l", "1", "-i", "127.0.0.2", "-p", strconv.Itoa(freePort(t)), "-recv_timeout", "2000", "-max_retrans", "2")
	banRow := `#bans tbody tr[data-ip="127.0.0.2"]`
	run(t, ctx, 30*time.Second, "the ban shown", until(fmt.Sprintf(`document.querySelector('%s') !== null`, banRow)))
	crack.wait()
	screenshot(t, ctx, "dashboard-ban.png")
	run(t, ctx, 5*time.Second, "lift the ban from the page",
		chromedp.Click(banRow+" button", chromedp.ByQuery),
		until(fmt.Sprintf(`document.querySelector('%s') === null`, banRow)))
	var bans banList
	api.getJSON("/v1/security/bans", &bans)
	if len(bans.Bans) != 0 {
		t.Fatalf("bans after lifting from the page: %+v", bans)
	}

	// Forget the token; a tenant's token then sees its tenant only: not
	// demo's registration, and no bans at all.
	run(t, ctx, 5*time.Second, "forget the token",
		chromedp.Click("#logout", chromedp.ByID),
		until(`document.getElementById('live').hidden && sessionStorage.length === 0`))
	connect(t, ctx, base, dashAcmeToken)
	var regsText string
	run(t, ctx, 5*time.Second, "acme's view",
		until(`document.querySelector('#registrations tbody td.empty') !== null`),
		chromedp.Text("#registrations tbody", &regsText, chromedp.ByQuery))
	var bansHidden bool
	run(t, ctx, 5*time.Second, "bans hidden", chromedp.Evaluate(`document.getElementById('bans-section').hidden`, &bansHidden))
	if !bansHidden || strings.Contains(regsText, "bob") {
		t.Errorf("a tenant token's page shows bans (%v) or another tenant's phones: %q", !bansHidden, regsText)
	}
	screenshot(t, ctx, "dashboard-tenant.png")

	// A wrong token: a clear message, no data.
	var status string
	run(t, ctx, 15*time.Second, "a wrong token",
		chromedp.Click("#logout", chromedp.ByID),
		chromedp.SendKeys("#token", "not-a-valid-token-0123456789abcdef", chromedp.ByID),
		chromedp.Click(`#login button[type="submit"]`, chromedp.ByQuery),
		until(`document.getElementById('status').className === 'error' && document.getElementById('live').hidden`),
		chromedp.Text("#status", &status, chromedp.ByID))
	if want := "401"; !strings.Contains(status, want) {
		t.Errorf("status for a wrong token %q, want it to mention %s", status, want)
	}
}

// checkMetrics scrapes /v1/metrics after one answered internal call: it
// parses as the Prometheus text format, counts the call, its setup and its
// relayed packets, and passes promtool's lint where promtool is installed.
func checkMetrics(t *testing.T, api apiClient) {
	t.Helper()
	var body []byte
	var fams map[string]*dto.MetricFamily
	value := func(name string, labels ...string) float64 {
		f := fams[name]
		if f == nil {
			return -1
		}
	next:
		for _, m := range f.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.Label {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		return -1
	}
	waitFor(t, "the ended call counted in /v1/metrics", 10*time.Second, func() bool {
		code, b := api.do("GET", "/v1/metrics")
		if code != 200 {
			t.Fatalf("metrics: %d %s", code, b)
		}
		var err error
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = parser.TextToMetricFamilies(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("metrics do not parse: %v", err)
		}
		body = b
		return value("pbx_calls_total", "direction", "internal", "cause", "answered") == 1
	})
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"pbx_call_setup_seconds", nil, 1},
		{"pbx_rtp_packets_total", []string{"direction", "in"}, 20},
		{"pbx_rtp_legs_total", nil, 2},
		{"pbx_registrations", nil, 1},
		{"pbx_calls_active", []string{"direction", "internal"}, 0},
		{"pbx_api_requests_total", []string{"route", "/v1/calls/{id}/hangup", "code", "202"}, 1},
		{"process_resident_memory_bytes", nil, 1},
		{"pbx_sip_udp_sources", nil, 1},
		{"pbx_sip_tcp_accepted_total", nil, 0},
	} {
		if v := value(c.name, c.labels...); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool is not installed: its lint of /v1/metrics was not run")
	}
}
