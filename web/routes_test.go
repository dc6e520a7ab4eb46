package web

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"pbx/appliance/config"
	"pbx/web/api"
)

// routeRow is one route of the management API with its expected answers.
type routeRow struct {
	method  string
	pattern string // as chi knows it
	scope   string // "" for health
	own     string // a path addressing acme's data (or the resource)
	ok      int    // status for an unrestricted token with the scope
	okCode  string // error code expected with ok when ok is an error
	// restricted is the status for the acme-restricted token on own.
	restricted int
	// other addresses globex's data (empty: none); otherStatus is what
	// the acme-restricted token gets there.
	other       string
	otherStatus int
	// missing addresses an id that does not exist (empty: none).
	missing string
}

func routeTable(e *env) []routeRow {
	acmeCDR := "/v1/cdr/acme/" + string(e.acmeID)
	globCDR := "/v1/cdr/globex/" + string(e.globID)
	return []routeRow{
		{method: "GET", pattern: "/v1/health", own: "/v1/health", ok: 200, restricted: 200},
		{method: "GET", pattern: "/v1/status", scope: "status:read", own: "/v1/status", ok: 200, restricted: 200},
		{method: "GET", pattern: "/v1/tenants", scope: "status:read", own: "/v1/tenants", ok: 200, restricted: 200},
		{method: "GET", pattern: "/v1/tenants/{tenant}", scope: "status:read", own: "/v1/tenants/acme", ok: 200, restricted: 200,
			other: "/v1/tenants/globex", otherStatus: 404, missing: "/v1/tenants/nope"},
		{method: "GET", pattern: "/v1/trunks", scope: "status:read", own: "/v1/trunks", ok: 200, restricted: 200,
			other: "/v1/trunks?tenant=globex", otherStatus: 403},
		{method: "GET", pattern: "/v1/trunks/{name}", scope: "status:read", own: "/v1/trunks/acme-trunk", ok: 200, restricted: 200,
			other: "/v1/trunks/globex-trunk", otherStatus: 404, missing: "/v1/trunks/nope"},
		{method: "POST", pattern: "/v1/trunks/{name}/refresh", scope: "operate", own: "/v1/trunks/acme-trunk/refresh", ok: 202, restricted: 202,
			other: "/v1/trunks/globex-trunk/refresh", otherStatus: 404, missing: "/v1/trunks/nope/refresh"},
		{method: "GET", pattern: "/v1/registrations", scope: "status:read", own: "/v1/registrations?tenant=acme", ok: 200, restricted: 200,
			other: "/v1/registrations?tenant=globex", otherStatus: 403},
		{method: "DELETE", pattern: "/v1/registrations/{tenant}/{extension}", scope: "operate", own: "/v1/registrations/acme/100", ok: 204, restricted: 204,
			other: "/v1/registrations/globex/200", otherStatus: 404, missing: "/v1/registrations/acme/999"},
		{method: "GET", pattern: "/v1/calls", scope: "status:read", own: "/v1/calls", ok: 200, restricted: 200,
			other: "/v1/calls?tenant=globex", otherStatus: 403},
		{method: "POST", pattern: "/v1/calls/{id}/hangup", scope: "operate", own: "/v1/calls/call-acme/hangup", ok: 202, restricted: 202,
			other: "/v1/calls/call-globex/hangup", otherStatus: 404, missing: "/v1/calls/nope/hangup"},
		{method: "GET", pattern: "/v1/dashboard", own: "/v1/dashboard", ok: 200, restricted: 200},
		{method: "GET", pattern: "/v1/dashboard/{asset}", own: "/v1/dashboard/app.js", ok: 200, restricted: 200,
			missing: "/v1/dashboard/nope.js"},
		{method: "GET", pattern: "/v1/metrics", scope: "status:read", own: "/v1/metrics", ok: 200, restricted: 403},
		{method: "GET", pattern: "/v1/events", scope: "status:read", own: "/v1/events", ok: 404, okCode: "not_found", restricted: 404},
		{method: "GET", pattern: "/v1/cdr", scope: "cdr:read", own: "/v1/cdr?tenant=acme", ok: 200, restricted: 200,
			other: "/v1/cdr?tenant=globex", otherStatus: 403},
		{method: "GET", pattern: "/v1/cdr/{tenant}/{id}", scope: "cdr:read", own: acmeCDR, ok: 200, restricted: 200,
			other: globCDR, otherStatus: 404, missing: "/v1/cdr/acme/20261120T100000.000Z-zzzzzzzz"},
		{method: "GET", pattern: "/v1/recordings", scope: "recordings:read", own: "/v1/recordings", ok: 404, okCode: "not_found", restricted: 404,
			other: "/v1/recordings?tenant=globex", otherStatus: 403},
		{method: "GET", pattern: "/v1/recordings/{tenant}/{id}", scope: "recordings:read", own: "/v1/recordings/acme/r1", ok: 404, okCode: "not_found", restricted: 404,
			missing: "/v1/recordings/acme/nope"},
		{method: "GET", pattern: "/v1/recordings/{tenant}/{id}/audio", scope: "recordings:read", own: "/v1/recordings/acme/r1/audio", ok: 404, okCode: "not_found", restricted: 404,
			missing: "/v1/recordings/acme/nope/audio"},
		{method: "GET", pattern: "/v1/voicemail", scope: "voicemail:read", own: "/v1/voicemail", ok: 404, okCode: "not_found", restricted: 404,
			other: "/v1/voicemail?tenant=globex", otherStatus: 403},
		{method: "GET", pattern: "/v1/voicemail/{tenant}/{extension}/{id}", scope: "voicemail:read", own: "/v1/voicemail/acme/100/m1", ok: 404, okCode: "not_found", restricted: 404,
			missing: "/v1/voicemail/acme/100/nope"},
		{method: "GET", pattern: "/v1/voicemail/{tenant}/{extension}/{id}/audio", scope: "voicemail:read", own: "/v1/voicemail/acme/100/m1/audio", ok: 404, okCode: "not_found", restricted: 404,
			missing: "/v1/voicemail/acme/100/nope/audio"},
		{method: "DELETE", pattern: "/v1/voicemail/{tenant}/{extension}/{id}", scope: "voicemail:delete", own: "/v1/voicemail/acme/100/m1", ok: 404, okCode: "not_found", restricted: 404,
			missing: "/v1/voicemail/acme/100/nope"},
		{method: "GET", pattern: "/v1/security/bans", scope: "security:read", own: "/v1/security/bans", ok: 200, restricted: 403},
		{method: "GET", pattern: "/v1/security/counters", scope: "security:read", own: "/v1/security/counters", ok: 200, restricted: 403},
		{method: "DELETE", pattern: "/v1/security/bans/{ip}", scope: "operate", own: "/v1/security/bans/192.0.2.66", ok: 204, restricted: 403,
			missing: "/v1/security/bans/192.0.2.99"},
		{method: "GET", pattern: "/v1/mobile/devices", scope: "mobile:read", own: "/v1/mobile/devices", ok: 404, okCode: "not_found", restricted: 404},
		{method: "DELETE", pattern: "/v1/mobile/devices/{tenant}/{deviceId}", scope: "mobile:manage", own: "/v1/mobile/devices/acme/d1", ok: 404, okCode: "not_found", restricted: 404,
			missing: "/v1/mobile/devices/acme/nope"},
	}
}

// TestRouteMatrix runs every route with every scope, the acme-restricted
// token on its own and on globex's data, a missing id, and no, bad and
// expired tokens.
func TestRouteMatrix(t *testing.T) {
	e := newEnv(t)
	for _, row := range routeTable(e) {
		t.Run(row.method+" "+row.pattern, func(t *testing.T) {
			expect := func(t *testing.T, what string, r response, status int, code string) {
				t.Helper()
				if r.status != status {
					t.Fatalf("%s: status %d, want %d; body %s", what, r.status, status, r.body)
				}
				if code != "" && r.errCode() != code {
					t.Fatalf("%s: code %q, want %q; body %s", what, r.errCode(), code, r.body)
				}
				if r.header.Get("X-Request-Id") == "" {
					t.Fatalf("%s: no X-Request-Id", what)
				}
			}
			for _, scope := range config.Scopes {
				r := e.do(nil, row.method, row.own, scopeSecret(scope))
				switch {
				case row.scope == "" || scope == row.scope:
					expect(t, "scope "+scope, r, row.ok, row.okCode)
				default:
					expect(t, "scope "+scope, r, http.StatusForbidden, "forbidden")
				}
			}
			r := e.do(nil, row.method, row.own, secretAcme)
			code := ""
			if row.restricted == 403 {
				code = "forbidden"
			}
			expect(t, "restricted on own", r, row.restricted, code)
			if row.other != "" {
				r := e.do(nil, row.method, row.other, secretAcme)
				expect(t, "restricted on other", r, row.otherStatus, map[int]string{403: "forbidden", 404: "not_found"}[row.otherStatus])
				r = e.do(nil, row.method, row.other, secretAdmin)
				if r.status != row.ok {
					t.Fatalf("admin on other: status %d, want %d; body %s", r.status, row.ok, r.body)
				}
			}
			if row.missing != "" {
				expect(t, "missing id", e.do(nil, row.method, row.missing, secretAdmin), http.StatusNotFound, "not_found")
			}
			// Each failure from its own peer, so that the failed
			// authentication bucket does not answer 429 instead.
			for name, tok := range map[string]string{"no token": "", "bad token": secretBad, "expired token": secretExpired} {
				r := e.do(e.freshPeer(), row.method, row.own, tok)
				if row.scope == "" {
					expect(t, name, r, row.ok, "")
					continue
				}
				expect(t, name, r, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("%s: WWW-Authenticate %q", name, r.header.Get("WWW-Authenticate"))
				}
			}
		})
	}
}

// TestRouteTableCoversRouter fails when a route is registered without a
// row in the matrix (or a row names a route that does not exist), and
// checks that every route's scope is the specification's.
func TestRouteTableCoversRouter(t *testing.T) {
	e := newEnv(t)
	rows := map[string]routeRow{}
	for _, row := range routeTable(e) {
		rows[row.method+" "+row.pattern] = row
	}
	seen := map[string]bool{}
	err := chi.Walk(e.srv.mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		if method == http.MethodHead {
			if _, ok := rows["GET "+route]; !ok {
				t.Errorf("HEAD %s has no GET row", route)
			}
			return nil
		}
		key := method + " " + route
		if _, ok := rows[key]; !ok {
			t.Errorf("route %s is registered but has no row in routeTable", key)
		}
		seen[key] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range rows {
		if !seen[key] {
			t.Errorf("row %s names no registered route", key)
		}
	}
	// The route table's scopes are the rows' scopes.
	h := api.New(api.Options{})
	for _, res := range h.Resources() {
		for _, rt := range res.Routes {
			key := rt.Method + " /v1" + strings.TrimSuffix(res.Prefix+rt.Pattern, "/")
			if row, ok := rows[key]; !ok || row.scope != rt.Scope {
				t.Errorf("%s: scope %q, row says %q", key, rt.Scope, row.scope)
			}
		}
	}
	if len(seen) < 25 {
		t.Fatalf("only %d routes walked", len(seen))
	}
}

// TestTenantRestriction checks the rows of lists and the narrowed status
// for the acme-restricted token.
func TestTenantRestriction(t *testing.T) {
	e := newEnv(t)
	st := e.get("/v1/status", secretAcme).json(t)
	// acme: 1 call, 2 registrations, trunk up 1; shared trunk up 1; shared
	// calls and registrations are not attributed to acme.
	if st["calls_active"] != 1.0 || st["registrations"] != 2.0 || st["tenants"] != 1.0 {
		t.Fatalf("narrowed status %v", st)
	}
	if tr := st["trunks"].(map[string]any); tr["up"] != 2.0 || tr["down"] != 0.0 {
		t.Fatalf("narrowed trunks %v", tr)
	}
	all := e.get("/v1/status", secretAdmin).json(t)
	if all["calls_active"] != 111.0 || all["tenants"] != 2.0 {
		t.Fatalf("full status %v", all)
	}

	names := func(path, list, field, token string) []string {
		var out []string
		for _, x := range e.get(path, token).json(t)[list].([]any) {
			out = append(out, x.(map[string]any)[field].(string))
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		path, list, field, token string
		want                     []string
	}{
		{"/v1/tenants", "tenants", "name", secretAcme, []string{"acme"}},
		{"/v1/tenants", "tenants", "name", secretAdmin, []string{"acme", "globex"}},
		{"/v1/trunks", "trunks", "name", secretAcme, []string{"acme-trunk", "shared"}},
		{"/v1/trunks?tenant=acme", "trunks", "name", secretAdmin, []string{"acme-trunk", "shared"}},
		{"/v1/trunks", "trunks", "name", secretAdmin, []string{"acme-trunk", "globex-trunk", "shared"}},
		{"/v1/registrations", "registrations", "extension", secretAcme, []string{"100", "101"}},
		{"/v1/registrations?online=true", "registrations", "extension", secretAdmin, []string{"100", "200"}},
		{"/v1/registrations?online=false", "registrations", "extension", secretAdmin, []string{"101"}},
		{"/v1/registrations?extension=200", "registrations", "tenant", secretAdmin, []string{"globex"}},
		{"/v1/calls", "calls", "id", secretAcme, []string{"call-acme"}},
		{"/v1/calls?tenant=globex", "calls", "id", secretAdmin, []string{"call-globex"}},
	}
	for _, c := range cases {
		if got := names(c.path, c.list, c.field, c.token); !slices.Equal(got, c.want) {
			t.Errorf("%s as %s: %v, want %v", c.path, c.token[:4], got, c.want)
		}
	}
	// Shared trunk by name is visible to the restricted token.
	if r := e.get("/v1/trunks/shared", secretAcme); r.status != 200 {
		t.Fatalf("shared trunk: %d", r.status)
	}
	// Call log: only acme rows, even without ?tenant=.
	recs := e.get("/v1/cdr", secretAcme).json(t)["records"].([]any)
	if len(recs) != 6 {
		t.Fatalf("acme records: %d", len(recs))
	}
	for _, x := range recs {
		if x.(map[string]any)["tenant"] != "acme" {
			t.Fatalf("row of another tenant: %v", x)
		}
	}
	if n := len(e.get("/v1/cdr", secretAdmin).json(t)["records"].([]any)); n != 12 {
		t.Fatalf("admin records: %d", n)
	}
}

// TestOperatorActions checks that actions reach the components and that
// each writes an audit line naming the token, never its secret.
func TestOperatorActions(t *testing.T) {
	e := newEnv(t)
	steps := []struct {
		method, path string
		status       int
		count        func() int32
	}{
		{"POST", "/v1/calls/call-acme/hangup", 202, e.calls.hungUp.Load},
		{"DELETE", "/v1/registrations/acme/100", 204, e.regs.dropped.Load},
		{"POST", "/v1/trunks/shared/refresh", 202, e.trunks.refreshed.Load},
		{"DELETE", "/v1/security/bans/192.0.2.66", 204, e.guard.lifted.Load},
	}
	for _, s := range steps {
		before := s.count()
		r := e.do(nil, s.method, s.path, scopeSecret("operate"))
		if r.status != s.status || len(r.body) != 0 {
			t.Fatalf("%s %s: %d %q", s.method, s.path, r.status, r.body)
		}
		if s.count() != before+1 {
			t.Fatalf("%s %s did not reach the component", s.method, s.path)
		}
	}
	logs := e.logs.String()
	if n := strings.Count(logs, `"msg":"api audit"`); n != len(steps) {
		t.Fatalf("%d audit lines, want %d:\n%s", n, len(steps), logs)
	}
	if !strings.Contains(logs, `"token":"only-operate"`) || !strings.Contains(logs, `"action":"call.hangup"`) {
		t.Fatalf("audit lines lack token or action:\n%s", logs)
	}
	for _, secret := range []string{scopeSecret("operate"), secretAdmin, secretAcme} {
		if strings.Contains(logs, secret) {
			t.Fatal("a token secret reached the log")
		}
	}
	// A refused action is audited too, with its status.
	e.do(nil, "POST", "/v1/calls/call-globex/hangup", secretAcme)
	if !strings.Contains(e.logs.String(), `"token":"acme"`) {
		t.Fatal("refused action not audited")
	}
}
