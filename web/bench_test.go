package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/sipcore/calls"
)

// serveInProcess runs one request through the whole middleware stack.
func serveInProcess(h http.Handler, method, target, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = "127.0.0.1:40000"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// BenchmarkStatus: GET /v1/status with a tenant-restricted token through
// request id, recovery, authentication (SHA-256 and a constant-time pass
// over every token), the per-token bucket, scope, query and narrowing.
func BenchmarkStatus(b *testing.B) {
	e := newEnv(b, withRate(1e12, 1e12))
	h := e.srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		if rec := serveInProcess(h, "GET", "/v1/status", secretAcme); rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkCDRPage: one page of 100 records of /v1/cdr out of 1,200 over
// three days of two tenants, through the full stack and the real store
// (summaries and parsed days warm after the first request).
func BenchmarkCDRPage(b *testing.B) {
	e := newEnv(b, withRate(1e12, 1e12))
	start := time.Date(2026, 11, 17, 8, 0, 0, 0, time.UTC)
	for i := range 600 {
		for _, tenant := range []string{"acme", "globex"} {
			r := cdr.NewRecord(tenant, calls.DirectionOutbound, start.Add(time.Duration(i)*7*time.Minute))
			r.From, r.To = "100", "+15557770000"
			r.Finish(r.Start.Add(time.Minute), calls.CauseBusy, 486, "")
			if err := e.store.Commit(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	h := e.srv.Handler()
	b.Run("first-page", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rec := serveInProcess(h, "GET", "/v1/cdr?limit=100", secretAdmin); rec.Code != 200 {
				b.Fatal(rec.Code, rec.Body.String())
			}
		}
	})
	b.Run("restricted-filtered", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rec := serveInProcess(h, "GET", "/v1/cdr?direction=outbound&answered=false&limit=100", secretAcme); rec.Code != 200 {
				b.Fatal(rec.Code, rec.Body.String())
			}
		}
	})
}
