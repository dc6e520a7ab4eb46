package cdr

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

// listAll pages through q with the given page size and returns every
// record in order.
func listAll(t *testing.T, s *Store, q Query, between func(page int, last Entry)) []Entry {
	t.Helper()
	var all []Entry
	for page := 0; page < 10000; page++ {
		p, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if p.Records == nil {
			t.Fatal("records is nil, want []")
		}
		all = append(all, p.Records...)
		if p.NextCursor == "" {
			return all
		}
		if len(p.Records) != q.Limit && q.Limit != 0 {
			t.Fatalf("page %d: %d records with a next cursor", page, len(p.Records))
		}
		q.Cursor = p.NextCursor
		if between != nil {
			between(page, p.Records[len(p.Records)-1])
		}
	}
	t.Fatal("too many pages")
	return nil
}

func ids(es []Entry) []ID {
	out := make([]ID, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func checkOrder(t *testing.T, es []Entry) {
	t.Helper()
	for i := 1; i < len(es); i++ {
		if !newer(&es[i-1], &es[i]) {
			t.Fatalf("records %d and %d out of order: %s %s", i-1, i, es[i-1].ID, es[i].ID)
		}
	}
}

// seed commits n records over days days for each tenant, deterministic
// fields, and returns them.
func seed(t *testing.T, s *Store, tenants []string, days, n int, base time.Time) []*Record {
	t.Helper()
	var out []*Record
	for ti, tn := range tenants {
		for i := range n {
			start := base.Add(-time.Duration(i) * time.Duration(days) * 24 * time.Hour / time.Duration(n)).Add(time.Duration(ti) * 17 * time.Second)
			r := call(tn, start, i%3 != 0, fmt.Sprintf("+1555%07d", i), fmt.Sprintf("+1666%07d", i%10))
			r.Direction = []calls.Direction{calls.DirectionInbound, calls.DirectionOutbound, calls.DirectionInternal}[i%3]
			r.Trunk = []string{"alpha", "beta"}[i%2]
			r.Extension = fmt.Sprintf("%d", 100+i%5)
			if i%4 == 0 {
				r.DID = fmt.Sprintf("+1777%07d", i)
			}
			if !r.Answered() {
				r.Cause = calls.CauseBusy
			}
			commit(t, s, r)
			out = append(out, r)
		}
	}
	return out
}

func TestListPagesNewestFirstAcrossTenantsAndZones(t *testing.T) {
	zones := map[string]*time.Location{"jp": mustLoc(t, "Asia/Tokyo"), "ny": mustLoc(t, "America/New_York"), "nz": mustLoc(t, "Pacific/Auckland")}
	s := newTestStore(t, zones, nil)
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	recs := seed(t, s, []string{"jp", "ny", "nz", "utc"}, 6, 60, base)
	for _, limit := range []int{1, 7, 100, 1000} {
		all := listAll(t, s, Query{Limit: limit}, nil)
		if len(all) != len(recs) {
			t.Fatalf("limit %d: %d records, want %d", limit, len(all), len(recs))
		}
		checkOrder(t, all)
	}
	// Every listed record carries its tenant and the index fields.
	p, _ := s.List(context.Background(), Query{Limit: 1})
	if p.Records[0].Tenant == "" || p.Records[0].From == "" || p.Records[0].Start.IsZero() {
		t.Fatalf("listed record lacks fields: %+v", p.Records[0])
	}
}

func TestListPagingWhileCommitting(t *testing.T) {
	s := newTestStore(t, nil, nil)
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	recs := seed(t, s, []string{"a", "b"}, 3, 150, base)
	first, err := s.List(context.Background(), Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	head := first.Records[0]
	var older []*Record       // committed during paging
	mustShow := map[ID]bool{} // older records whose start is behind the cursor
	q := Query{Limit: 10, Cursor: first.NextCursor}
	all := append([]Entry{}, first.Records...)
	lastFirst := first.Records[len(first.Records)-1]
	all = append(all, listAll(t, s, q, func(page int, last Entry) {
		if page == 0 {
			last = lastFirst
		}
		// Newer than everything: must not appear in this traversal.
		commit(t, s, call("a", base.Add(time.Hour+time.Duration(page)*time.Second), false, "n", "n"))
		// Far older than the cursor: must appear exactly once.
		r := call("b", base.AddDate(0, 0, -2).Add(-time.Duration(page)*time.Minute-time.Second), false, "o", "o")
		commit(t, s, r)
		older = append(older, r)
		e := r.Entry()
		if e.before(last.startMS, last.ID) {
			mustShow[r.ID] = true
		}
	})...)
	checkOrder(t, all)
	seen := map[ID]int{}
	for _, e := range all {
		seen[e.ID]++
		if e.From == "n" {
			t.Fatalf("record newer than the head %s listed: %s", head.ID, e.ID)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", id, n)
		}
	}
	for _, r := range recs {
		if seen[r.ID] != 1 {
			t.Fatalf("record %s skipped", r.ID)
		}
	}
	if len(mustShow) < 5 || len(mustShow) == len(older) {
		t.Fatalf("test does not exercise both cases: %d of %d behind the cursor", len(mustShow), len(older))
	}
	for _, r := range older {
		if mustShow[r.ID] && seen[r.ID] != 1 {
			t.Fatalf("record %s committed behind the cursor listed %d times", r.ID, seen[r.ID])
		}
		if !mustShow[r.ID] && seen[r.ID] != 0 {
			t.Fatalf("record %s committed ahead of the cursor was listed", r.ID)
		}
	}
	fresh := listAll(t, s, Query{Limit: 1000}, nil)
	if len(fresh) != len(recs)+2*len(older) {
		t.Fatalf("fresh listing has %d, want %d", len(fresh), len(recs)+2*len(older))
	}
}

func TestListFilters(t *testing.T) {
	s := newTestStore(t, nil, nil)
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	recs := seed(t, s, []string{"a", "b"}, 10, 90, base)
	yes, no := true, false
	from, to := base.AddDate(0, 0, -4), base.AddDate(0, 0, -2)
	for _, tc := range []struct {
		name string
		q    Query
		keep func(r *Record) bool
	}{
		{"all", Query{}, func(r *Record) bool { return true }},
		{"tenant", Query{Tenant: "b"}, func(r *Record) bool { return r.Tenant == "b" }},
		{"allowed set", Query{Tenants: []string{"a"}}, func(r *Record) bool { return r.Tenant == "a" }},
		{"tenant outside allowed set", Query{Tenants: []string{"a"}, Tenant: "b"}, func(r *Record) bool { return false }},
		{"unknown tenant", Query{Tenant: "zz"}, func(r *Record) bool { return false }},
		{"direction", Query{Direction: calls.DirectionOutbound}, func(r *Record) bool { return r.Direction == calls.DirectionOutbound }},
		{"answered", Query{Answered: &yes}, func(r *Record) bool { return r.Answered() }},
		{"unanswered", Query{Answered: &no}, func(r *Record) bool { return !r.Answered() }},
		{"trunk", Query{Trunk: "beta"}, func(r *Record) bool { return r.Trunk == "beta" }},
		{"extension", Query{Extension: "103"}, func(r *Record) bool { return r.Extension == "103" }},
		{"party extension", Query{Party: "103"}, func(r *Record) bool { return isParty(r, "103") }},
		{"party placed internal", Query{Party: "+15550000005"}, func(r *Record) bool { return isParty(r, "+15550000005") }},
		{"party not from outbound", Query{Party: "+15550000004"}, func(r *Record) bool { return false }},
		{"number long", Query{Number: "5550000042"}, func(r *Record) bool { return r.From == "+15550000042" }},
		{"number in to", Query{Number: "6660000007"}, func(r *Record) bool { return r.To == "+16660000007" }},
		{"number short", Query{Number: "0004"}, func(r *Record) bool { return contains(r.From, "0004") || contains(r.To, "0004") }},
		{"number in did", Query{Number: "7770000008"}, func(r *Record) bool { return r.DID == "+17770000008" }},
		{"number nowhere", Query{Number: "999999999"}, func(r *Record) bool { return false }},
		{"range", Query{From: &from, To: &to}, func(r *Record) bool { return !r.Start.Before(from) && !r.Start.After(to) }},
		{"range and filters", Query{From: &from, To: &to, Direction: calls.DirectionInbound, Trunk: "alpha"},
			func(r *Record) bool {
				return !r.Start.Before(from) && !r.Start.After(to) && r.Direction == calls.DirectionInbound && r.Trunk == "alpha"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []ID
			for _, r := range recs {
				n := r.normalize()
				if tc.keep(&n) {
					want = append(want, r.ID)
				}
			}
			tc.q.Limit = 7
			got := listAll(t, s, tc.q, nil)
			checkOrder(t, got)
			g := ids(got)
			slices.Sort(g)
			slices.Sort(want)
			if !slices.Equal(g, want) {
				t.Fatalf("got %d records, want %d", len(g), len(want))
			}
		})
	}
}

// isParty is Query.Party's rule, spelt out on the record.
func isParty(r *Record, ext string) bool {
	return r.Extension == ext || r.Direction == calls.DirectionInternal && r.From == ext
}

func contains(s, sub string) bool { return len(sub) <= len(s) && (s == sub || indexOf(s, sub) >= 0) }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestListExactRangeBounds(t *testing.T) {
	s := newTestStore(t, nil, nil)
	at := time.Date(2026, 11, 21, 12, 0, 0, 123_000_000, time.UTC)
	r := call("a", at, false, "1", "2")
	commit(t, s, r)
	for _, tc := range []struct {
		from, to time.Time
		n        int
	}{
		{at, at, 1},
		{at.Add(time.Millisecond), at.Add(time.Hour), 0},
		{at.Add(-time.Hour), at.Add(-time.Millisecond), 0},
		{at.Add(-time.Nanosecond), at.Add(time.Nanosecond), 1},
	} {
		p, err := s.List(context.Background(), Query{From: &tc.from, To: &tc.to})
		if err != nil || len(p.Records) != tc.n {
			t.Errorf("[%v, %v]: %d records %v, want %d", tc.from, tc.to, len(p.Records), err, tc.n)
		}
	}
}

func TestListErrors(t *testing.T) {
	s := newTestStore(t, nil, nil)
	seed(t, s, []string{"a"}, 1, 5, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	from := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	to := from.Add(-time.Second)
	p, err := s.List(context.Background(), Query{Limit: 2})
	if err != nil || p.NextCursor == "" {
		t.Fatalf("first page: %v", err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(p.NextCursor)
	edited := slices.Clone(raw)
	edited[5] ^= 1
	for _, tc := range []struct {
		name string
		q    Query
		want error
	}{
		{"limit above max", Query{Limit: MaxLimit + 1}, ErrLimit},
		{"negative limit", Query{Limit: -1}, ErrLimit},
		{"to before from", Query{From: &from, To: &to}, ErrRange},
		{"bad direction", Query{Direction: "up"}, ErrFilter},
		{"bad tenant", Query{Tenant: "../x"}, ErrFilter},
		{"garbage cursor", Query{Cursor: "!!!"}, ErrBadCursor},
		{"offset cursor", Query{Cursor: "100"}, ErrBadCursor},
		{"edited cursor", Query{Cursor: base64.RawURLEncoding.EncodeToString(edited)}, ErrBadCursor},
		{"truncated cursor", Query{Cursor: p.NextCursor[:len(p.NextCursor)-3]}, ErrBadCursor},
		{"cursor of another query", Query{Cursor: p.NextCursor, Trunk: "alpha"}, ErrBadCursor},
	} {
		if _, err := s.List(context.Background(), tc.q); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if p, err := s.List(context.Background(), Query{Limit: MaxLimit}); err != nil || len(p.Records) != 5 {
		t.Fatalf("limit max: %v", err)
	}
	if p, err := s.List(context.Background(), Query{}); err != nil || len(p.Records) != 5 || p.NextCursor != "" {
		t.Fatalf("default limit: %d %q %v", len(p.Records), p.NextCursor, err)
	}
	// A cursor from another store key is refused.
	other, _ := New(Options{DataDir: s.root, CursorKey: []byte("another key")}, nil)
	if _, err := other.List(context.Background(), Query{Limit: 2, Cursor: p.NextCursor}); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("cursor under another key: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.List(ctx, Query{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestDefaultLimit(t *testing.T) {
	s := newTestStore(t, nil, nil)
	seed(t, s, []string{"a"}, 1, DefaultLimit+1, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	p, err := s.List(context.Background(), Query{})
	if err != nil || len(p.Records) != DefaultLimit || p.NextCursor == "" {
		t.Fatalf("%d records, cursor %q, %v", len(p.Records), p.NextCursor, err)
	}
}

// TestListSeesRewrittenIndex: the cache notices an index replaced or cut
// by repair or reindex.
func TestListSeesRewrittenIndex(t *testing.T) {
	s := newTestStore(t, nil, nil)
	base := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC) // four calls on one day
	recs := seed(t, s, []string{"a"}, 1, 4, base)
	if p, _ := s.List(context.Background(), Query{}); len(p.Records) != 4 {
		t.Fatal("setup")
	}
	idx := filepath.Join(s.dayDir("a", recs[0].Start), IndexFile)
	os.Remove(idx)
	if p, _ := s.List(context.Background(), Query{}); len(p.Records) != 0 {
		t.Fatalf("index removed, still %d records", len(p.Records))
	}
	if _, err := s.Reindex(context.Background(), ReindexOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.List(context.Background(), Query{}); len(p.Records) != 4 {
		t.Fatalf("after reindex: %d records", len(p.Records))
	}
	// A small cache still lists everything correctly.
	small, _ := New(Options{DataDir: s.root, CacheEntries: 1}, nil)
	got := listAll(t, small, Query{Limit: 3}, nil)
	if len(got) != 4 {
		t.Fatalf("small cache: %d", len(got))
	}
}
