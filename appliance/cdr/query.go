package cdr

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"pbx/sipcore/calls"
)

// Query selects call records. Zero fields do not filter.
type Query struct {
	// Tenants is the set the caller may see (a tenant-scoped token); empty
	// means every tenant.
	Tenants []string
	// Tenant narrows to one tenant. A tenant outside Tenants gives an empty
	// page, not an error, so a scoped caller learns nothing about others.
	Tenant string
	// From and To bound start, both inclusive.
	From, To *time.Time
	// Direction is inbound, outbound or internal.
	Direction calls.Direction
	// Number is a substring of from, to or did (case-sensitive).
	Number string
	// Answered selects answered (true) or unanswered (false) calls.
	Answered *bool
	// Trunk and Extension match exactly.
	Trunk, Extension string
	// Party is an extension's own calls: those on which it was the
	// record's extension (called, answering, or calling out on a trunk)
	// and the internal calls it placed (from it). The device API's call
	// history uses it.
	Party string
	// Limit is the page size: 0 means DefaultLimit; above MaxLimit is an
	// error.
	Limit int
	// Cursor is the NextCursor of the previous page of the same query.
	Cursor string
}

// Page is one page of a listing. Records are index entries (see Entry) with
// their tenant filled in, newest first; Get returns a full record.
// NextCursor is empty on the last page.
type Page struct {
	Records    []Entry `json:"records"`
	NextCursor string  `json:"next_cursor"`
}

// pos is a position in listing order: (start, id), newest first.
type pos struct {
	ms int64
	id ID
}

// idMax sorts after every valid id: a position (ms, idMax) comes before
// every line that starts at ms.
const idMax ID = "\xff"

func (p pos) after(o pos) bool { // p comes later in the listing than o (is older)
	if p.ms != o.ms {
		return p.ms < o.ms
	}
	return p.id < o.id
}

func minPos(a, b pos) pos {
	if a.after(b) {
		return a
	}
	return b
}

// filter is a validated query.
type filter struct {
	fromMS    int64
	upper     pos // lines strictly after this position
	direction calls.Direction
	number    string
	answered  *bool
	trunk     string
	extension string
	party     string
}

func (f *filter) matches(e *Entry) bool {
	if e.startMS < f.fromMS {
		return false
	}
	if f.direction != "" && e.Direction != f.direction {
		return false
	}
	if f.answered != nil && e.Answered != *f.answered {
		return false
	}
	if f.trunk != "" && e.Trunk != f.trunk {
		return false
	}
	if f.extension != "" && e.Extension != f.extension {
		return false
	}
	if f.party != "" && !IsParty(e, f.party) {
		return false
	}
	if f.number != "" && !strings.Contains(e.From, f.number) && !strings.Contains(e.To, f.number) && !strings.Contains(e.DID, f.number) {
		return false
	}
	return true
}

// IsParty reports whether e is one of extension ext's own calls (see
// Query.Party).
func IsParty(e *Entry, ext string) bool {
	return e.Extension == ext || e.Direction == calls.DirectionInternal && e.From == ext
}

// List returns one page of records matching q, newest first across
// tenants, ordered by (start, id) descending.
//
// It reads only index files. Day directories whose dates cannot hold a
// start in [From, To] (or before the cursor) are never opened; a day whose
// summary rules the filter out is skipped without reading its lines.
//
// Paging guarantee: a cursor is the position (start, id) of the last record
// returned. The next page holds the records strictly after that position
// that exist when it is read, so no record is repeated and no record older
// than the cursor is skipped, whatever is committed in between. Records are
// committed when a call ends, so a record committed during a traversal with
// a start already passed by the cursor (a long call that started before
// records already listed) is not shown by that traversal; a fresh listing
// shows it. The same holds within a page for records committed while the
// page is being assembled.
func (s *Store) List(ctx context.Context, q Query) (Page, error) {
	f, limit, err := s.compile(q)
	if err != nil {
		return Page{}, err
	}
	fp := fingerprint(q)
	if q.Cursor != "" {
		c, err := s.decodeCursor(q.Cursor, fp)
		if err != nil {
			return Page{}, err
		}
		f.upper = minPos(f.upper, c)
	}
	page := Page{Records: []Entry{}}
	if f.upper.ms < f.fromMS {
		return page, nil
	}
	tenants, err := s.selectTenants(q)
	if err != nil {
		return Page{}, err
	}
	// Day directories whose conservative bounds meet [fromMS, upper].
	var fromD, toD date
	if f.fromMS > math.MinInt64/2 {
		fromD = dateOf(time.UnixMilli(f.fromMS).UTC().Add(-36 * time.Hour))
	}
	if f.upper.ms < math.MaxInt64/2 {
		toD = dateOf(time.UnixMilli(f.upper.ms).UTC().Add(14 * time.Hour))
	}
	h := &runHeap{}
	for _, t := range tenants {
		days, err := s.listDays(t, fromD, toD)
		if err != nil {
			return Page{}, fmt.Errorf("list days of %s: %w", t, err)
		}
		for _, d := range days {
			lo, hi := d.date.bounds()
			if hi <= f.fromMS || lo > f.upper.ms {
				continue
			}
			h.items = append(h.items, &run{day: d, state: runCandidate, key: minPos(pos{hi - 1, idMax}, f.upper)})
		}
	}
	heap.Init(h)
	var last *Entry
	for steps := 0; h.Len() > 0; steps++ {
		if steps%256 == 0 {
			if err := ctx.Err(); err != nil {
				return Page{}, err
			}
		}
		r := heap.Pop(h).(*run)
		switch r.state {
		case runCandidate:
			v, err := s.cache.view(r.day.index(), &f, false)
			if err != nil {
				return Page{}, fmt.Errorf("read index %s %s: %w", r.day.tenant, r.day.date, err)
			}
			if !v.pass {
				continue
			}
			r.state = runSummarized
			r.key = minPos(r.key, pos{v.maxMS, idMax})
			if r.key.ms >= f.fromMS {
				heap.Push(h, r)
			}
		case runSummarized:
			v, err := s.cache.view(r.day.index(), &f, true)
			if err != nil {
				return Page{}, fmt.Errorf("read index %s %s: %w", r.day.tenant, r.day.date, err)
			}
			if !v.pass {
				continue
			}
			// Lines appended since the summary was taken and newer than the
			// key would come out of order: this traversal does not show them.
			r.entries = v.entries
			r.i = sortSearch(r.entries, r.key)
			if r.next(&f) {
				r.state = runLoaded
				heap.Push(h, r)
			}
		case runLoaded:
			e := &r.entries[r.i]
			if len(page.Records) == limit {
				page.NextCursor = s.encodeCursor(pos{last.startMS, last.ID}, fp)
				return page, nil
			}
			if last == nil || last.ID != e.ID || last.startMS != e.startMS {
				out := *e
				out.Tenant = r.day.tenant
				page.Records = append(page.Records, out)
				last = &page.Records[len(page.Records)-1]
			}
			r.i++
			if r.next(&f) {
				heap.Push(h, r)
			}
		}
	}
	return page, nil
}

// sortSearch returns the index of the first entry (newest-first slice)
// strictly after position p.
func sortSearch(es []Entry, p pos) int {
	i, _ := slices.BinarySearchFunc(es, p, func(e Entry, p pos) int {
		if e.before(p.ms, p.id) {
			return 1
		}
		return -1
	})
	return i
}

func (s *Store) compile(q Query) (filter, int, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return filter{}, 0, fmt.Errorf("%w: %d (1..%d)", ErrLimit, q.Limit, MaxLimit)
	}
	f := filter{fromMS: math.MinInt64, upper: pos{math.MaxInt64, idMax},
		direction: q.Direction, number: q.Number, answered: q.Answered, trunk: q.Trunk, extension: q.Extension, party: q.Party}
	if q.Direction != "" && !q.Direction.Valid() {
		return filter{}, 0, fmt.Errorf("%w: direction %q", ErrFilter, q.Direction)
	}
	if q.Tenant != "" {
		if err := ValidateTenant(q.Tenant); err != nil {
			return filter{}, 0, fmt.Errorf("%w: %w", ErrFilter, err)
		}
	}
	if q.From != nil && q.To != nil && q.To.Before(*q.From) {
		return filter{}, 0, ErrRange
	}
	if q.From != nil {
		// A start is stored at millisecond precision: round From up.
		ms := q.From.UnixMilli()
		if q.From.After(time.UnixMilli(ms)) {
			ms++
		}
		f.fromMS = ms
	}
	if q.To != nil {
		f.upper = pos{q.To.UnixMilli(), idMax}
	}
	return f, limit, nil
}

func (s *Store) selectTenants(q Query) ([]string, error) {
	allowed := map[string]bool{}
	for _, t := range q.Tenants {
		if ValidateTenant(t) == nil {
			allowed[t] = true
		}
	}
	if q.Tenant != "" {
		if len(q.Tenants) > 0 && !allowed[q.Tenant] {
			return nil, nil
		}
		return []string{q.Tenant}, nil
	}
	if len(q.Tenants) > 0 {
		out := make([]string, 0, len(allowed))
		for t := range allowed {
			out = append(out, t)
		}
		slices.Sort(out)
		return out, nil
	}
	return s.tenants()
}

// Get returns the full record of tenant with id. It looks in the day
// directory given by the id's timestamp in the tenant's time zone, then in
// the adjacent days and the UTC date (a zone changed since the call).
func (s *Store) Get(ctx context.Context, tenant string, id ID) (*Record, error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	t, err := id.Time()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	local := t.In(s.location(tenant))
	tries := []date{dateOf(local), dateOf(local.AddDate(0, 0, -1)), dateOf(local.AddDate(0, 0, 1)), dateOf(t)}
	for i, d := range tries {
		if slices.Contains(tries[:i], d) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := readRecord(filepath.Join(s.dayDirOf(tenant, d), string(id)+recordExt))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read record %s/%s: %w", tenant, id, err)
		}
		if r.ID != id || r.Tenant != tenant {
			return nil, fmt.Errorf("record file %s/%s names %s/%s", tenant, id, r.Tenant, r.ID)
		}
		return r, nil
	}
	return nil, ErrNotFound
}

// fingerprint binds a cursor to the filters of the query that made it.
func fingerprint(q Query) [8]byte {
	var b strings.Builder
	ts := slices.Clone(q.Tenants)
	slices.Sort(ts)
	b.WriteString(strings.Join(ts, ","))
	for _, v := range []string{q.Tenant, string(q.Direction), q.Number, q.Trunk, q.Extension, q.Party} {
		b.WriteByte(0)
		b.WriteString(v)
	}
	b.WriteByte(0)
	if q.From != nil {
		b.WriteString(strconv.FormatInt(q.From.UnixNano(), 10))
	}
	b.WriteByte(0)
	if q.To != nil {
		b.WriteString(strconv.FormatInt(q.To.UnixNano(), 10))
	}
	b.WriteByte(0)
	if q.Answered != nil {
		b.WriteString(strconv.FormatBool(*q.Answered))
	}
	sum := sha256.Sum256([]byte(b.String()))
	var fp [8]byte
	copy(fp[:], sum[:])
	return fp
}

// encodeCursor is the listing's cursor after position p.
func (s *Store) encodeCursor(p pos, fp [8]byte) string {
	return Cursor{Key: s.opts.CursorKey}.Encode(p.ms, p.id, fp)
}

// decodeCursor checks a cursor and returns its position.
func (s *Store) decodeCursor(c string, fp [8]byte) (pos, error) {
	ms, id, err := Cursor{Key: s.opts.CursorKey}.Decode(c, fp)
	return pos{ms: ms, id: id}, err
}

// run is one day's lines during a listing, in the merge heap.
type runState uint8

const (
	runCandidate  runState = iota // only the directory is known; key from its date
	runSummarized                 // summary read; key is its newest start
	runLoaded                     // lines loaded; key is entries[i]
)

type run struct {
	day     day
	state   runState
	key     pos
	entries []Entry
	i       int
}

// next advances to the first entry at or after i that passes f and sets the
// key; false when the run is exhausted.
func (r *run) next(f *filter) bool {
	for ; r.i < len(r.entries); r.i++ {
		e := &r.entries[r.i]
		if e.startMS < f.fromMS {
			return false
		}
		if f.matches(e) {
			r.key = pos{e.startMS, e.ID}
			return true
		}
	}
	return false
}

type runHeap struct{ items []*run }

func (h *runHeap) Len() int { return len(h.items) }
func (h *runHeap) Less(i, j int) bool {
	a, b := h.items[i].key, h.items[j].key
	if a.ms != b.ms {
		return a.ms > b.ms
	}
	if a.id != b.id {
		return a.id > b.id
	}
	// A run not yet loaded goes first at equal keys: its lines may equal
	// the key.
	return h.items[i].state < h.items[j].state
}
func (h *runHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *runHeap) Push(x any)    { h.items = append(h.items, x.(*run)) }
func (h *runHeap) Pop() any {
	n := len(h.items)
	x := h.items[n-1]
	h.items = h.items[:n-1]
	return x
}
