package web

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"pbx/web/dashboard"
)

// TestDashboardAssets: the page and its files are served with a strict
// Content-Security-Policy and their types, and nothing in them is inline
// or fetched from elsewhere.
func TestDashboardAssets(t *testing.T) {
	e := newEnv(t)
	files := map[string]string{
		"/v1/dashboard":           "text/html; charset=utf-8",
		"/v1/dashboard/app.js":    "text/javascript; charset=utf-8",
		"/v1/dashboard/style.css": "text/css; charset=utf-8",
	}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+\s*=|\sstyle\s*=|javascript:`)
	for path, ct := range files {
		r := e.get(path, "")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != ct {
			t.Fatalf("%s: %d %q", path, r.status, r.header.Get("Content-Type"))
		}
		if r.header.Get("Content-Security-Policy") != dashboard.CSP || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: security headers %v", path, r.header)
		}
		if m := external.Find(r.body); m != nil {
			t.Errorf("%s refers to another origin: %s", path, m)
		}
		if strings.HasSuffix(ct, "html; charset=utf-8") {
			if m := inline.Find(r.body); m != nil {
				t.Errorf("%s has inline code or style: %s", path, m)
			}
		}
	}
	for _, csp := range []string{"script-src 'self'", "default-src 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(dashboard.CSP, csp) || strings.Contains(dashboard.CSP, "unsafe") {
			t.Errorf("CSP %q lacks %s or allows unsafe sources", dashboard.CSP, csp)
		}
	}
	for _, bad := range []string{"/v1/dashboard/..%2fserver.go", "/v1/dashboard/assets", "/v1/dashboard/dashboard.go"} {
		if r := e.get(bad, ""); r.status != http.StatusNotFound || r.errCode() != "not_found" {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if r := e.do(nil, http.MethodHead, "/v1/dashboard", ""); r.status != 200 || len(r.body) != 0 {
		t.Errorf("HEAD: %d, %d bytes", r.status, len(r.body))
	}
}
