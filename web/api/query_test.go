package api

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/sipcore/calls"
)

func TestParseQuery(t *testing.T) {
	accepted := []string{"tenant", "from", "limit"}
	good := map[string]map[string]string{
		"":                          {},
		"tenant=acme":               {"tenant": "acme"},
		"tenant=acme&limit=5":       {"tenant": "acme", "limit": "5"},
		"tenant=a%2Fb":              {"tenant": "a/b"},
		"&tenant=acme&":             {"tenant": "acme"},
		"from=2026-11-20T10:00:00Z": {"from": "2026-11-20T10:00:00Z"},
	}
	for raw, want := range good {
		q, err := ParseQuery(raw, accepted)
		if err != nil || len(q) != len(want) {
			t.Errorf("%q: %v %v", raw, q, err)
			continue
		}
		for k, v := range want {
			if q[k] != v {
				t.Errorf("%q: %s=%q, want %q", raw, k, q[k], v)
			}
		}
	}
	bad := []string{"x=1", "tenant=a&tenant=b", "tenant=", "tenant", "tenant=%zz", "%zz=1", "=1",
		"tenant=" + strings.Repeat("a", maxValueLen+1), strings.Repeat("tenant=a&", maxQueryPairs+1),
		strings.Repeat("x", maxQueryLen+1)}
	for _, raw := range bad {
		if q, err := ParseQuery(raw, accepted); err == nil {
			t.Errorf("%q accepted: %v", raw, q)
		} else if e, ok := err.(*Error); !ok || e.Status != 400 || e.Code != CodeInvalidRequest {
			t.Errorf("%q: %v", raw, err)
		}
	}
	_, err := ParseQuery("x=1", nil)
	if err == nil || !strings.Contains(err.Error(), "accepts none") {
		t.Fatalf("no parameters accepted: %v", err)
	}
}

func TestCDRQuery(t *testing.T) {
	p := &Principal{Name: "t", Scopes: []string{ScopeCDR}, Tenants: []string{"acme"}}
	q, _ := ParseQuery("from=2026-11-20T10:00:00%2B01:00&to=2026-11-21T00:00:00Z&direction=outbound&answered=true&limit=7&number=555&trunk=t1&extension=100&cursor=c", cdrParams)
	cq, err := CDRQuery(q, p)
	if err != nil {
		t.Fatal(err)
	}
	if !cq.From.Equal(time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)) || cq.Direction != calls.DirectionOutbound || !*cq.Answered ||
		cq.Limit != 7 || cq.Number != "555" || cq.Trunk != "t1" || cq.Extension != "100" || cq.Cursor != "c" ||
		len(cq.Tenants) != 1 || cq.Tenants[0] != "acme" {
		t.Fatalf("%+v", cq)
	}
	// The caller's tenants bound the query even without ?tenant=.
	cq, _ = CDRQuery(Query{}, p)
	if len(cq.Tenants) != 1 || cq.Limit != cdr.DefaultLimit {
		t.Fatalf("%+v", cq)
	}
	if _, err := CDRQuery(Query{"tenant": "globex"}, p); err == nil || err.(*Error).Status != 403 {
		t.Fatalf("other tenant: %v", err)
	}
	cq, err = CDRQuery(Query{"tenant": "globex"}, &Principal{Scopes: []string{ScopeCDR}})
	if err != nil || cq.Tenant != "globex" || cq.Tenants != nil {
		t.Fatalf("unrestricted: %+v %v", cq, err)
	}
}

// FuzzParseQuery: the parser never panics, accepts only listed keys at
// most once with non-empty values, and every refusal is a 400.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "tenant=acme", "tenant=a&tenant=b", "limit=1001", "from=2026-11-20T10:00:00%2B01:00",
		"%zz", "a=%", "tenant=%E2%82%AC", "cursor=AQAAAZq", ";tenant=x", "tenant=a+b", "&&&", "limit=00001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := ParseQuery(raw, cdrParams)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Status != 400 {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		for k, v := range q {
			if v == "" || !contains(cdrParams, k) {
				t.Fatalf("%q: %s=%q", raw, k, v)
			}
		}
		// Values round-trip through the standard parser when it agrees
		// the string is well-formed.
		if std, err := url.ParseQuery(raw); err == nil {
			for k, v := range q {
				if len(std[k]) != 1 || std[k][0] != v {
					t.Fatalf("%q: %s=%q, net/url says %q", raw, k, v, std[k])
				}
			}
		}
		cq, err := CDRQuery(q, &Principal{Tenants: []string{"acme"}})
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Status != 400 && e.Status != 403 {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		if cq.Limit < 1 || cq.Limit > cdr.MaxLimit || len(cq.Tenants) != 1 {
			t.Fatalf("%q: %+v", raw, cq)
		}
		if cq.From != nil && cq.To != nil && cq.To.Before(*cq.From) {
			t.Fatalf("%q: to before from passed", raw)
		}
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
