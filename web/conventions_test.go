package web

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/web/api"
)

// empty components: every list is empty.
type emptyAll struct{}

func (emptyAll) Tenants(context.Context) ([]api.Tenant, error)             { return nil, nil }
func (emptyAll) Trunks(context.Context) ([]api.Trunk, error)               { return nil, nil }
func (emptyAll) Refresh(context.Context, string) error                     { return api.ErrNotFound }
func (emptyAll) Registrations(context.Context) ([]api.Registration, error) { return nil, nil }
func (emptyAll) Drop(context.Context, string, string) error                { return api.ErrNotFound }
func (emptyAll) Calls(context.Context) ([]api.Call, error)                 { return nil, nil }
func (emptyAll) Hangup(context.Context, string) error                      { return api.ErrNotFound }
func (emptyAll) Bans(context.Context) ([]api.Ban, error)                   { return nil, nil }
func (emptyAll) Counters(context.Context) (api.Counters, error)            { return api.Counters{}, nil }
func (emptyAll) Lift(context.Context, netip.Addr) error                    { return api.ErrNotFound }

// failing components: every call fails with a cause that must not leak.
type failing struct{}

var errLeak = errors.New("open /var/lib/pbx/secret-path/index.jsonl: permission denied")

func (failing) Status(context.Context) (api.StatusSnapshot, error) {
	return api.StatusSnapshot{}, errLeak
}
func (failing) Trunks(context.Context) ([]api.Trunk, error) {
	panic("trunk table corrupt at /var/lib/pbx")
}
func (failing) Refresh(context.Context, string) error             { return errLeak }
func (failing) List(context.Context, cdr.Query) (cdr.Page, error) { return cdr.Page{}, errLeak }
func (failing) Get(context.Context, string, cdr.ID) (*cdr.Record, error) {
	return nil, errLeak
}

func TestEmptyListsRenderAsArrays(t *testing.T) {
	e := newEnv(t, func(_ *config.API, o *Options) {
		var z emptyAll
		o.Backends = api.Backends{Status: fakeStatus{}, Tenants: z, Trunks: z, Registrations: z, Calls: z, Guard: z, CallLog: o.Backends.CallLog}
	})
	for path, want := range map[string]string{
		"/v1/tenants":           `{"tenants":[]}`,
		"/v1/trunks":            `{"trunks":[]}`,
		"/v1/registrations":     `{"registrations":[]}`,
		"/v1/calls":             `{"calls":[]}`,
		"/v1/security/bans":     `{"bans":[]}`,
		"/v1/cdr?tenant=nobody": `{"records":[],"next_cursor":""}`,
	} {
		r := e.get(path, secretAdmin)
		if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
			t.Errorf("%s: %d %s, want %s", path, r.status, r.body, want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", path, ct)
		}
	}
	// Nested lists of an object are [] too.
	r := e.get("/v1/cdr/acme/"+string(e.acmeID), secretAdmin)
	for _, f := range []string{`"steps":[]`, `"legs":[]`, `"digits":[]`} {
		if !strings.Contains(string(r.body), f) {
			t.Errorf("record lacks %s: %s", f, r.body)
		}
	}
}

func TestCDRPagination(t *testing.T) {
	e := newEnv(t)
	seen := map[string]bool{}
	path := "/v1/cdr?limit=5"
	var pages int
	for pages = 1; pages <= 10; pages++ {
		m := e.get(path, secretAdmin).json(t)
		recs := m["records"].([]any)
		for _, x := range recs {
			id := x.(map[string]any)["id"].(string)
			if seen[id] {
				t.Fatalf("record %s repeated", id)
			}
			seen[id] = true
		}
		next, _ := m["next_cursor"].(string)
		if next == "" {
			break
		}
		if len(recs) != 5 {
			t.Fatalf("page %d has %d records before the last page", pages, len(recs))
		}
		path = "/v1/cdr?limit=5&cursor=" + next
	}
	if len(seen) != 12 || pages != 3 {
		t.Fatalf("%d records in %d pages, want 12 in 3", len(seen), pages)
	}
	// A cursor of another query, or an edited one, is 400.
	first := e.get("/v1/cdr?limit=5", secretAdmin).json(t)["next_cursor"].(string)
	for _, p := range []string{
		"/v1/cdr?limit=5&direction=outbound&cursor=" + first,
		"/v1/cdr?cursor=" + first[:len(first)-2] + "AA",
		"/v1/cdr?cursor=not-a-cursor",
	} {
		r := e.get(p, secretAdmin)
		if r.status != 400 || r.errCode() != "invalid_request" {
			t.Errorf("%s: %d %s", p, r.status, r.body)
		}
	}
	// Filters reach the store.
	m := e.get("/v1/cdr?tenant=globex&direction=inbound&answered=false&number=5512303&limit=1000", secretAdmin).json(t)
	if recs := m["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["tenant"] != "globex" {
		t.Fatalf("filtered: %v", m)
	}
}

func TestQueryStrings(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		path    string
		status  int
		message string // a part of error.message
	}{
		{"/v1/cdr?foo=1", 400, "accepted are tenant, from, to, direction, number, answered, trunk, extension, cursor, limit"},
		{"/v1/status?tenant=acme", 400, "accepts none"},
		{"/v1/recordings?direction=inbound", 400, "accepted are tenant, from, to, extension, number, cursor, limit"},
		{"/v1/voicemail?limit=5", 400, "accepted are tenant, extension"},
		{"/v1/registrations?number=1", 400, "accepted are tenant, extension, online"},
		{"/v1/calls?extension=1", 400, "accepted are tenant"},
		{"/v1/cdr?limit=1001", 400, "limit"},
		{"/v1/cdr?limit=0", 400, "limit"},
		{"/v1/cdr?limit=-1", 400, "limit"},
		{"/v1/cdr?limit=ten", 400, "limit"},
		{"/v1/cdr?limit=1000", 200, ""},
		{"/v1/cdr?from=yesterday", 400, "RFC 3339"},
		{"/v1/cdr?from=2026-11-20T10:00:00+01:00", 400, "%2B"},
		{"/v1/cdr?from=2026-11-20T10:00:00%2B01:00", 200, ""},
		{"/v1/cdr?from=2026-11-21T00:00:00Z&to=2026-11-20T00:00:00Z", 400, "to is before from"},
		{"/v1/cdr?direction=sideways", 400, "direction"},
		{"/v1/cdr?answered=maybe", 400, "answered"},
		{"/v1/cdr?tenant=acme&tenant=globex", 400, "more than once"},
		{"/v1/cdr?tenant=", 400, "empty"},
		{"/v1/cdr?tenant=%zz", 400, "percent-encoding"},
		{"/v1/cdr?tenant=../etc", 400, "tenant"},
		{"/v1/registrations?online=yes", 400, "online"},
		{"/v1/cdr?access_token=" + secretAdmin, 400, "unknown query parameter"},
	}
	for _, c := range cases {
		r := e.get(c.path, secretAdmin)
		if r.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.path, r.status, r.body, c.status)
			continue
		}
		if c.message != "" && (r.errCode() != "invalid_request" || !strings.Contains(string(r.body), c.message)) {
			t.Errorf("%s: %s lacks %q", c.path, r.body, c.message)
		}
	}
	// A token in the query string is never read.
	if r := e.do(e.freshPeer(), "GET", "/v1/status?access_token="+secretAdmin, ""); r.status != 401 {
		t.Fatalf("token in query: %d", r.status)
	}
}

func TestHeadOnEveryGet(t *testing.T) {
	e := newEnv(t)
	for _, row := range routeTable(e) {
		if row.method != "GET" {
			continue
		}
		g := e.get(row.own, secretAdmin)
		h := e.do(nil, "HEAD", row.own, secretAdmin)
		if h.status != g.status || len(h.body) != 0 || h.header.Get("Content-Type") != g.header.Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q %q; GET %d %q", row.own, h.status, h.body, h.header.Get("Content-Type"), g.status, g.header.Get("Content-Type"))
		}
	}
}

func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t)
	cases := []struct{ method, path, allow string }{
		{"PUT", "/v1/status", "GET, HEAD"},
		{"POST", "/v1/cdr", "GET, HEAD"},
		{"DELETE", "/v1/calls/x/hangup", "POST"},
		{"GET", "/v1/trunks/t/refresh", "POST"},
		{"POST", "/v1/security/bans/192.0.2.1", "DELETE"},
		{"PUT", "/v1/voicemail/acme/100/m1", "GET, HEAD, DELETE"},
		{"OPTIONS", "/v1/health", "GET, HEAD"},
		{"PATCH", "/v1/registrations/acme/100", "DELETE"},
		{"FOO", "/v1/status", "GET, HEAD"},
	}
	for _, c := range cases {
		// No credentials: routing answers before authentication.
		r := e.do(e.freshPeer(), c.method, c.path, "")
		if r.status != 405 || r.header.Get("Allow") != c.allow || r.errCode() == "" || r.header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, r.status, r.header.Get("Allow"), r.body)
		}
		if c.method == "GET" {
			continue
		}
		if g := e.do(nil, c.method, c.path, secretAdmin); g.status != 405 {
			t.Errorf("%s %s with a token: %d", c.method, c.path, g.status)
		}
	}
}

func TestUnknownMethodOnUnknownPath(t *testing.T) {
	e := newEnv(t)
	if r := e.do(nil, "FOO", "/v1/nope", ""); r.status != 404 || r.header.Get("Allow") != "" {
		t.Fatalf("FOO /v1/nope: %d %v", r.status, r.header)
	}
}

func TestRequestID(t *testing.T) {
	e := newEnv(t, func(a *config.API, _ *Options) { a.RateLimit.RequestsPerMinute, a.RateLimit.Burst = 60, 1 })
	long := strings.Repeat("a", 64)
	cases := []struct {
		in   string
		echo bool
	}{
		{"abcd-123", true}, {long, true}, {"A_b-C_d-E_f", true},
		{"abc-123", false}, {long + "b", false}, {"abcd.1234", false}, {"abcd 1234", false}, {"", false},
	}
	check := func(name string, r response, in string, echo bool) {
		t.Helper()
		got := r.header.Get("X-Request-Id")
		if echo && got != in || !echo && (got == in || !validRequestID(got)) {
			t.Errorf("%s: sent %q, got %q", name, in, got)
		}
		if r.status >= 400 && !strings.Contains(string(r.body), `"request_id":"`+got+`"`) {
			t.Errorf("%s: envelope lacks the request id: %s", name, r.body)
		}
	}
	for _, c := range cases {
		var hdr []string
		if c.in != "" {
			hdr = []string{"X-Request-Id", c.in}
		}
		check("health", e.do(nil, "GET", "/v1/health", "", hdr...), c.in, c.echo)
		check("401", e.do(e.freshPeer(), "GET", "/v1/status", "", hdr...), c.in, c.echo)
		check("404", e.do(nil, "GET", "/v1/nope", "", hdr...), c.in, c.echo)
		check("405", e.do(nil, "PUT", "/v1/status", "", hdr...), c.in, c.echo)
	}
	// 429: the per-token bucket holds one request.
	e.get("/v1/status", scopeSecret("status:read"))
	r := e.do(nil, "GET", "/v1/status", scopeSecret("status:read"), "X-Request-Id", "limited-1")
	if r.status != 429 {
		t.Fatalf("second request: %d", r.status)
	}
	check("429", r, "limited-1", true)
	// Two ids: none is echoed.
	r = e.do(nil, "GET", "/v1/health", "", "X-Request-Id", "abcd-123", "X-Request-Id", "abcd-456")
	if id := r.header.Get("X-Request-Id"); id == "abcd-123" || id == "abcd-456" {
		t.Fatalf("one of two ids echoed: %q", id)
	}
}

func TestInternalErrorsAreGeneric(t *testing.T) {
	e := newEnv(t, func(_ *config.API, o *Options) {
		o.Backends.Status, o.Backends.Trunks, o.Backends.CallLog = failing{}, failing{}, failing{}
	})
	for _, p := range []string{"/v1/status", "/v1/trunks", "/v1/cdr", "/v1/cdr/acme/" + string(e.acmeID)} {
		r := e.get(p, secretAdmin)
		if r.status != 500 || r.errCode() != "internal" || !strings.Contains(string(r.body), `"message":"internal error"`) {
			t.Errorf("%s: %d %s", p, r.status, r.body)
		}
		if strings.Contains(string(r.body), "/var/lib") {
			t.Errorf("%s: cause leaked: %s", p, r.body)
		}
		id := r.header.Get("X-Request-Id")
		logs := e.logs.String()
		i := strings.Index(logs, id)
		if i < 0 || !strings.Contains(logs, "/var/lib/pbx") {
			t.Errorf("%s: cause not logged with request id %s", p, id)
		}
	}
	// The server survives a panic.
	if r := e.get("/v1/health", ""); r.status != 200 {
		t.Fatal("server down after a panic")
	}
}

func TestUnknownPathIsUnauthenticated404(t *testing.T) {
	e := newEnv(t)
	c := e.freshPeer()
	for i := range 20 {
		for _, p := range []string{"/v1/nope", "/v2/status", "/", "/v1/cdr/a/b/c/d", "/v1/status/extra", "/v1/security"} {
			r := e.do(c, "GET", p, []string{"", secretBad}[i%2])
			if r.status != 404 || r.errCode() != "not_found" {
				t.Fatalf("%s: %d %s", p, r.status, r.body)
			}
		}
	}
	// None of them touched the failed-authentication bucket.
	if r := e.do(c, "GET", "/v1/status", secretBad); r.status != 401 {
		t.Fatalf("after 404s: %d", r.status)
	}
}

func TestCORS(t *testing.T) {
	preflight := func(e *env, origin string) response {
		return e.do(nil, "OPTIONS", "/v1/status", "", "Origin", origin, "Access-Control-Request-Method", "GET",
			"Access-Control-Request-Headers", "authorization")
	}
	off := newEnv(t)
	r := preflight(off, "https://ops.example")
	if r.status != 405 || r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("CORS off preflight: %d %v", r.status, r.header)
	}
	if r := off.do(nil, "GET", "/v1/health", "", "Origin", "https://ops.example"); r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS header with CORS off")
	}

	on := newEnv(t, func(a *config.API, _ *Options) { a.CORS.AllowedOrigins = []string{"https://ops.example"} })
	r = preflight(on, "https://ops.example")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://ops.example" ||
		!strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("allowed preflight: %d %v", r.status, r.header)
	}
	for _, o := range []string{"https://evil.example", "https://ops.example.evil", "*", "null"} {
		r = preflight(on, o)
		if r.status != 405 || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight from %s: %d %v", o, r.status, r.header)
		}
	}
	r = on.do(nil, "GET", "/v1/status", secretAdmin, "Origin", "https://ops.example")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://ops.example" ||
		!slices.Contains(r.header.Values("Vary"), "Origin") {
		t.Fatalf("simple request: %d %v", r.status, r.header)
	}
}

func TestPostTakesNoBody(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest("POST", e.base+"/v1/calls/call-acme/hangup", strings.NewReader(`{"x":1}`))
	req.Header.Set("Authorization", "Bearer "+secretAdmin)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || e.calls.hungUp.Load() != 0 {
		t.Fatalf("POST with a body: %d, hangups %d", resp.StatusCode, e.calls.hungUp.Load())
	}
}

func TestRecordingPresign(t *testing.T) {
	e := newEnv(t, func(a *config.API, _ *Options) { a.Recordings.Presign = true })
	if r := e.get("/v1/recordings/acme/r1/audio", secretAdmin); r.status != 500 || r.errCode() != "internal" {
		t.Fatalf("audio with presign: %d %s", r.status, r.body)
	}
	if r := e.get("/v1/recordings/acme/r1", secretAdmin); r.status != 404 {
		t.Fatalf("metadata with presign: %d %s", r.status, r.body)
	}
	if r := e.get("/v1/recordings/acme/r1/audio", scopeSecret("cdr:read")); r.status != 403 {
		t.Fatalf("audio without scope: %d", r.status)
	}
}

func TestComponentNotRunning(t *testing.T) {
	e := newEnv(t, func(_ *config.API, o *Options) { o.Backends.CallLog, o.Backends.Guard = nil, nil })
	cases := []struct{ path, want string }{
		{"/v1/cdr", "call log is not running"},
		{"/v1/cdr/acme/" + string(e.acmeID), "call log is not running"},
		{"/v1/security/bans", "security guard is not running"},
		{"/v1/recordings", "recording is not running"},
		{"/v1/voicemail", "voicemail is not running"},
		{"/v1/mobile/devices", "mobile is not running"},
	}
	for _, c := range cases {
		if r := e.get(c.path, secretAdmin); r.status != 404 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: %d %s", c.path, r.status, r.body)
		}
		if r := e.do(e.freshPeer(), "GET", c.path, ""); r.status != 401 {
			t.Errorf("%s without a token: %d", c.path, r.status)
		}
		if r := e.get(c.path, scopeSecret("operate")); r.status != 403 {
			t.Errorf("%s without the scope: %d", c.path, r.status)
		}
	}
}

func TestDeviceAPIMount(t *testing.T) {
	e := newEnv(t, func(_ *config.API, o *Options) {
		o.DeviceAPI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte(r.URL.Path))
		})
	})
	// Device routes reach the device API, with the common middleware.
	r := e.do(nil, "POST", "/v1/mobile/login", "")
	if r.status != http.StatusTeapot || string(r.body) != "/v1/mobile/login" || r.header.Get("X-Request-Id") == "" {
		t.Fatalf("device route: %d %q", r.status, r.body)
	}
	// The operator routes stay with the management API.
	if r := e.get("/v1/mobile/devices", scopeSecret("mobile:read")); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("operator route: %d %s", r.status, r.body)
	}
	if r := e.do(e.freshPeer(), "GET", "/v1/mobile/devices", ""); r.status != 401 {
		t.Fatalf("operator route without a token: %d", r.status)
	}
}
