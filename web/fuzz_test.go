package web

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// FuzzCDRListing drives /v1/cdr with arbitrary query strings (cursors
// included) through the whole stack: the answer is 200 with a page, or 400
// or 403 with the envelope, never a 500.
func FuzzCDRListing(f *testing.F) {
	e := newEnv(f)
	h := e.srv.Handler()
	first := serveInProcess(h, "GET", "/v1/cdr?limit=2", secretAcme)
	var page struct {
		Records    []map[string]any `json:"records"`
		NextCursor string           `json:"next_cursor"`
	}
	if err := json.Unmarshal(first.Body.Bytes(), &page); err != nil || page.NextCursor == "" {
		f.Fatalf("seed page: %s", first.Body)
	}
	for _, s := range []string{"limit=2&cursor=" + page.NextCursor, "cursor=" + page.NextCursor, "limit=2&cursor=" + page.NextCursor + "x",
		"limit=2&cursor=" + strings.ToUpper(page.NextCursor), "tenant=acme&from=2026-11-20T10:02:00Z", "number=555&answered=true",
		"cursor=%00", "limit=2&cursor=AQ", "tenant=globex"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if _, err := url.ParseRequestURI("/v1/cdr?" + raw); err != nil || strings.ContainsAny(raw, "# ") {
			return // not a request target a client could send
		}
		rec := serveInProcess(h, "GET", "/v1/cdr?"+raw, secretAcme)
		switch rec.Code {
		case 200:
			var p struct {
				Records []struct {
					Tenant string `json:"tenant"`
				} `json:"records"`
				NextCursor *string `json:"next_cursor"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Records == nil || p.NextCursor == nil {
				t.Fatalf("%q: page %s", raw, rec.Body)
			}
			for _, r := range p.Records {
				if r.Tenant != "acme" {
					t.Fatalf("%q: row of %q", raw, r.Tenant)
				}
			}
		case 400, 403:
			if !strings.Contains(rec.Body.String(), `"error":{"code":"`) {
				t.Fatalf("%q: %d %s", raw, rec.Code, rec.Body)
			}
		default:
			t.Fatalf("%q: %d %s", raw, rec.Code, rec.Body)
		}
	})
}
