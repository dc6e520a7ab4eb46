package cdr

import (
	"context"
	"errors"
	"testing"
	"time"
)

func FuzzParseLine(f *testing.F) {
	e := call("a", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), true, "+1555", "+1666").normalize()
	en := e.Entry()
	f.Add(en.AppendLine(nil))
	f.Add([]byte(`{"id":"20261121T151230.123Z-k3j9q2ab","start":"2026-11-21T15:12:30.123Z"}`))
	f.Add([]byte(`{"id":"20261121T151230.123Z-k3j9q2ab","start":"2026-11-21T15:12:30.1`))
	f.Add([]byte(`{"id":"../x","start":"2026-11-21T15:12:30.123Z"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"tenant":"x","id":"20261121T151230.123Z-k","start":"2026-11-21T15:12:30Z"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseLine(line)
		if err != nil {
			return
		}
		if e.ID.Validate() != nil || e.Start.IsZero() || e.startMS != e.Start.UnixMilli() {
			t.Fatalf("accepted an invalid entry: %+v", e)
		}
		// What parses re-encodes to a line that parses to the same entry.
		again, err := ParseLine(e.AppendLine(nil))
		if err != nil {
			t.Fatalf("re-encoded line refused: %v", err)
		}
		if again.ID != e.ID || again.startMS != e.startMS || again.From != e.From || again.Answered != e.Answered {
			t.Fatalf("round trip changed the entry: %+v vs %+v", e, again)
		}
	})
}

func FuzzCursor(f *testing.F) {
	s, _ := New(Options{DataDir: f.TempDir()}, nil)
	fp := fingerprint(Query{})
	good := s.encodeCursor(pos{1763737950123, "20261121T151230.123Z-k3j9q2ab"}, fp)
	f.Add(good)
	f.Add("")
	f.Add("AQ")
	f.Add(good[:len(good)-1])
	f.Add("100")
	f.Fuzz(func(t *testing.T, c string) {
		p, err := s.decodeCursor(c, fp)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("error %v is not ErrBadCursor", err)
			}
			return
		}
		if p.id.Validate() != nil {
			t.Fatalf("accepted invalid id %q", p.id)
		}
		if s.encodeCursor(p, fp) != c {
			t.Fatalf("accepted a cursor it would not produce: %q", c)
		}
		// List with it must not fail on the cursor.
		if _, err := s.List(context.Background(), Query{Cursor: c}); err != nil {
			t.Fatalf("List: %v", err)
		}
	})
}

// FuzzParseLineFastSlow: the fast path and encoding/json agree on every
// line the fast path accepts.
func FuzzParseLineFastSlow(f *testing.F) {
	e := call("a", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), true, "+1555", "+1666").normalize()
	en := e.Entry()
	f.Add(en.AppendLine(nil))
	f.Add([]byte(`{"id":"20261121T151230.123Z-k3j9q2ab","start":"2026-02-31T15:12:30.5Z","duration_ms":007}`))
	f.Add([]byte(`{"id":"20261121T151230.123Z-k3j9q2ab","start":"2026-11-21T15:12:30Z","rec":true,"rec":false}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ferr := parseFast(line)
		if ferr != nil {
			return
		}
		slow, serr := parseSlow(line)
		if serr != nil {
			t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", serr, line)
		}
		fast.Start, slow.Start = msUTC(fast.Start), msUTC(slow.Start)
		if !fast.Start.Equal(slow.Start) {
			t.Fatalf("start %v vs %v", fast.Start, slow.Start)
		}
		fast.Start, slow.Start = time.Time{}, time.Time{}
		if fast != slow {
			t.Fatalf("fast %+v\nslow %+v", fast, slow)
		}
	})
}
