package recording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pbx/appliance/cdr"
)

// putRecording files a finished recording (a sidecar and a tiny WAV) as
// the writer would.
func putRecording(t *testing.T, s *Store, tenant string, start time.Time, from, answeredBy string) Sidecar {
	t.Helper()
	id := string(cdr.NewID(start))
	sc := Sidecar{ID: id, Tenant: tenant, Direction: "internal", From: from, To: answeredBy, AnsweredBy: answeredBy, DID: "+1555" + from,
		Start: start.UTC().Truncate(time.Millisecond), End: start.Add(time.Minute).UTC(), Format: formatFor(8, 8000)}
	dir := s.dayDir(tenant, start)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	wav := filepath.Join(dir, id+".wav")
	if err := os.WriteFile(wav, append(wavHeader(8000, 2, 8), make([]byte, 8)...), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := digest(wav, &sc); err != nil {
		t.Fatal(err)
	}
	if err := writeSidecar(filepath.Join(dir, id+".json"), &sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestListNewestFirstAcrossDaysTenantsAndPages(t *testing.T) {
	s := newStore(t) // every tenant in UTC-5: late calls land in the previous day's directory
	base := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var want []string // newest first
	for i := 0; i < 30; i++ {
		start := base.Add(time.Duration(i) * 97 * time.Minute) // spans three days, both sides of midnight
		tenant := []string{"acme", "globex"}[i%2]
		sc := putRecording(t, s, tenant, start, fmt.Sprint(100+i%3), "200")
		want = append([]string{sc.ID}, want...)
	}
	ctx := context.Background()
	var got []string
	q := Query{Limit: 7}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Recordings {
			got = append(got, r.ID)
		}
		if p.NextCursor == "" {
			break
		}
		if len(p.Recordings) != 7 {
			t.Fatalf("page of %d with a cursor", len(p.Recordings))
		}
		q.Cursor = p.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listing\n got %v\nwant %v", got, want)
	}

	// Tenant scoping and filters.
	p, err := s.List(ctx, Query{Tenants: []string{"acme"}, Limit: 1000})
	if err != nil || len(p.Recordings) != 15 {
		t.Fatalf("acme's token: %d recordings, %v", len(p.Recordings), err)
	}
	for _, r := range p.Recordings {
		if r.Tenant != "acme" {
			t.Fatalf("acme's token sees %s's recording", r.Tenant)
		}
	}
	if p, _ := s.List(ctx, Query{Tenants: []string{"acme"}, Tenant: "globex"}); len(p.Recordings) != 0 {
		t.Errorf("a scoped token asking for another tenant sees %d", len(p.Recordings))
	}
	if p, _ := s.List(ctx, Query{Extension: "101"}); len(p.Recordings) != 10 {
		t.Errorf("extension 101 (calling): %d, want 10", len(p.Recordings))
	}
	if p, _ := s.List(ctx, Query{Extension: "200"}); len(p.Recordings) != 30 {
		t.Errorf("extension 200 (answering): %d, want 30", len(p.Recordings))
	}
	if p, _ := s.List(ctx, Query{Number: "5551"}); len(p.Recordings) != 30 {
		t.Errorf("number in did: %d, want 30", len(p.Recordings))
	}
	from, to := base.Add(97*time.Minute), base.Add(5*97*time.Minute)
	p, err = s.List(ctx, Query{From: &from, To: &to})
	if err != nil || len(p.Recordings) != 5 || p.Recordings[0].ID != want[24] || p.Recordings[4].ID != want[28] {
		t.Errorf("from/to (both inclusive): %d recordings, %v", len(p.Recordings), err)
	}

	// Bad input.
	if _, err := s.List(ctx, Query{Limit: 1001}); !errors.Is(err, cdr.ErrLimit) {
		t.Errorf("limit 1001: %v", err)
	}
	if _, err := s.List(ctx, Query{From: &to, To: &from}); !errors.Is(err, cdr.ErrRange) {
		t.Errorf("to before from: %v", err)
	}
	first, _ := s.List(ctx, Query{Limit: 2})
	if _, err := s.List(ctx, Query{Limit: 2, Number: "1", Cursor: first.NextCursor}); !errors.Is(err, cdr.ErrBadCursor) {
		t.Errorf("a cursor of another query: %v", err)
	}
	if _, err := s.List(ctx, Query{Limit: 2, Cursor: first.NextCursor[:len(first.NextCursor)-2] + "AA"}); !errors.Is(err, cdr.ErrBadCursor) {
		t.Errorf("an edited cursor: %v", err)
	}
}

func TestGetAndOpenAreTenantScoped(t *testing.T) {
	s := newStore(t)
	sc := putRecording(t, s, "acme", time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC), "100", "200")
	ctx := context.Background()
	got, err := s.Get(ctx, "acme", sc.ID)
	if err != nil || got.ID != sc.ID || got.SHA256 != sc.SHA256 {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.Get(ctx, "globex", sc.ID); !errors.Is(err, cdr.ErrNotFound) {
		t.Errorf("another tenant's recording: %v", err)
	}
	if _, err := s.Get(ctx, "../acme", sc.ID); !errors.Is(err, cdr.ErrNotFound) {
		t.Errorf("a path as tenant: %v", err)
	}
	if _, err := s.Get(ctx, "acme", "../../etc/passwd"); !errors.Is(err, cdr.ErrNotFound) {
		t.Errorf("a path as id: %v", err)
	}
	f, _, err := s.Open(ctx, "acme", sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := f.Seek(0, io.SeekEnd)
	f.Close()
	if n != sc.Bytes {
		t.Errorf("audio of %d bytes, sidecar says %d", n, sc.Bytes)
	}
}
