package recording

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"pbx/appliance/cdr"
)

// Query selects recordings; it follows cdr.Query. Zero fields do not
// filter.
type Query struct {
	// Tenants is the set the caller may see; empty means every tenant.
	Tenants []string
	// Tenant narrows to one tenant (outside Tenants: an empty page).
	Tenant string
	// From and To bound the call's start, both inclusive.
	From, To *time.Time
	// Extension matches the calling extension (from) or the one that
	// answered, exactly.
	Extension string
	// Number is a substring of from, to or did.
	Number string
	// Limit is the page size: 0 means cdr.DefaultLimit, at most
	// cdr.MaxLimit.
	Limit int
	// Cursor is the NextCursor of the previous page of the same query.
	Cursor string
}

// Page is one page of sidecars, newest first; NextCursor is empty on the
// last page.
type Page struct {
	Recordings []Sidecar `json:"recordings"`
	NextCursor string    `json:"next_cursor"`
}

// pos is a position in listing order: (start, id), newest first. The
// start is the one in the id, the call's start at millisecond precision.
type pos struct {
	ms int64
	id string
}

func (p pos) after(o pos) bool { // p comes later in the listing (is older)
	if p.ms != o.ms {
		return p.ms < o.ms
	}
	return p.id < o.id
}

// entry is a sidecar file found in a day directory, not yet read.
type entry struct {
	pos
	path string
}

// List returns one page of the sidecars matching q, newest first. It
// reads day directories newest first and opens only the sidecars it needs
// to fill the page (never an audio file). Day directories are the
// tenants' local dates, so a directory may hold starts from 14 hours
// before to 36 hours after its UTC midnight: entries are released in order
// only once no directory still unread can hold a newer one.
func (s *Store) List(ctx context.Context, q Query) (Page, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = cdr.DefaultLimit
	case limit < 0 || limit > cdr.MaxLimit:
		return Page{}, fmt.Errorf("%w: %d (1..%d)", cdr.ErrLimit, q.Limit, cdr.MaxLimit)
	}
	if q.From != nil && q.To != nil && q.To.Before(*q.From) {
		return Page{}, cdr.ErrRange
	}
	fromMS, upper := int64(math.MinInt64), pos{math.MaxInt64, "\xff"}
	if q.From != nil {
		fromMS = q.From.UnixMilli()
		if q.From.After(time.UnixMilli(fromMS)) {
			fromMS++
		}
	}
	if q.To != nil {
		upper = pos{q.To.UnixMilli(), "\xff"}
	}
	fp := fingerprint(q)
	if q.Cursor != "" {
		c, err := s.decodeCursor(q.Cursor, fp)
		if err != nil {
			return Page{}, err
		}
		if c.after(upper) {
			upper = c
		}
	}
	allowed := tenantSet(q)
	page := Page{Recordings: []Sidecar{}}
	if allowed != nil && len(allowed) == 0 {
		return page, nil
	}
	days, err := s.days(fromMS, upper.ms)
	if err != nil {
		return Page{}, err
	}
	var pending []entry // read, not yet released; sorted newest first
	for i := 0; ; {
		if err := ctx.Err(); err != nil {
			return Page{}, err
		}
		// Nothing in a directory still unread starts at or after bound.
		bound := int64(math.MinInt64)
		if i < len(days) {
			_, bound = days[i].bounds()
		}
		for len(pending) > 0 && pending[0].ms >= bound {
			e := pending[0]
			pending = pending[1:]
			sc, err := readSidecar(e.path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return Page{}, fmt.Errorf("list recordings: %w", err)
			}
			if sc.ID != e.id || !matches(sc, q, allowed) {
				continue
			}
			if len(page.Recordings) == limit {
				last := page.Recordings[limit-1]
				t, _ := cdr.ID(last.ID).Time()
				page.NextCursor = s.encodeCursor(pos{t.UnixMilli(), last.ID}, fp)
				return page, nil
			}
			sc.Start = sc.Start.UTC()
			page.Recordings = append(page.Recordings, *sc)
		}
		if i == len(days) {
			return page, nil
		}
		es, err := readDay(days[i].dir, fromMS, upper)
		if err != nil {
			return Page{}, err
		}
		i++
		pending = append(pending, es...)
		slices.SortFunc(pending, func(a, b entry) int {
			switch {
			case b.after(a.pos):
				return -1
			case a.after(b.pos):
				return 1
			}
			return 0
		})
	}
}

// readDay lists the sidecars of one day directory whose position lies in
// [fromMS, upper).
func readDay(dir string, fromMS int64, upper pos) ([]entry, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list recordings: %w", err)
	}
	var out []entry
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), sidecarExt)
		if !ok {
			continue
		}
		t, err := cdr.ID(id).Time()
		if err != nil {
			continue
		}
		p := pos{t.UnixMilli(), id}
		if p.ms < fromMS || !p.after(upper) {
			continue
		}
		out = append(out, entry{pos: p, path: filepath.Join(dir, e.Name())})
	}
	return out, nil
}

// tenantSet is the set of tenants q may see; nil means any.
func tenantSet(q Query) map[string]bool {
	var allowed map[string]bool
	if len(q.Tenants) > 0 {
		allowed = map[string]bool{}
		for _, t := range q.Tenants {
			allowed[t] = true
		}
	}
	if q.Tenant != "" {
		if allowed != nil && !allowed[q.Tenant] {
			return map[string]bool{}
		}
		allowed = map[string]bool{q.Tenant: true}
	}
	return allowed
}

func matches(sc *Sidecar, q Query, allowed map[string]bool) bool {
	if allowed != nil && !allowed[sc.Tenant] {
		return false
	}
	if q.Extension != "" && sc.From != q.Extension && sc.AnsweredBy != q.Extension {
		return false
	}
	if q.Number != "" && !strings.Contains(sc.From, q.Number) && !strings.Contains(sc.To, q.Number) && !strings.Contains(sc.DID, q.Number) {
		return false
	}
	return true
}

// dayRef is one day directory of the recordings.
type dayRef struct {
	y, m, d int
	dir     string
}

// bounds are conservative Unix-millisecond bounds of the starts the day
// can hold whatever a tenant's zone: [00:00 UTC - 14h, 24:00 UTC + 12h).
func (d dayRef) bounds() (lo, hi int64) {
	m := time.Date(d.y, time.Month(d.m), d.d, 0, 0, 0, 0, time.UTC)
	return m.Add(-14 * time.Hour).UnixMilli(), m.Add(36 * time.Hour).UnixMilli()
}

// days lists the day directories, newest first, that can hold a start in
// [fromMS, toMS].
func (s *Store) days(fromMS, toMS int64) ([]dayRef, error) {
	var out []dayRef
	years, err := numDirs(s.root, 4, 1, 9999)
	if err != nil {
		return nil, err
	}
	for _, y := range years {
		ydir := filepath.Join(s.root, fmt.Sprintf("%04d", y))
		months, err := numDirs(ydir, 2, 1, 12)
		if err != nil {
			return nil, err
		}
		for _, m := range months {
			mdir := filepath.Join(ydir, fmt.Sprintf("%02d", m))
			ds, err := numDirs(mdir, 2, 1, 31)
			if err != nil {
				return nil, err
			}
			for _, d := range ds {
				r := dayRef{y, m, d, filepath.Join(mdir, fmt.Sprintf("%02d", d))}
				if lo, hi := r.bounds(); hi <= fromMS || lo > toMS {
					continue
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// numDirs lists the subdirectories of dir named by width-digit numbers in
// [lo, hi], largest first.
func numDirs(dir string, width, lo, hi int) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list recordings: %w", err)
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if !e.IsDir() || len(e.Name()) != width || err != nil || n < lo || n > hi || e.Name()[0] == '+' || e.Name()[0] == '-' {
			continue
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b int) int { return b - a })
	return out, nil
}

// Get returns the sidecar of tenant's recording id, looking in the day
// directory of the id's time in the tenant's zone, the adjacent days and
// the UTC date. Another tenant's recording is cdr.ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, id string) (*Sidecar, error) {
	_, sc, err := s.find(ctx, tenant, id)
	return sc, err
}

// Open returns the WAV of tenant's recording id with its sidecar; the
// caller closes it.
func (s *Store) Open(ctx context.Context, tenant, id string) (io.ReadSeekCloser, *Sidecar, error) {
	dir, sc, err := s.find(ctx, tenant, id)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(filepath.Join(dir, id+audioExt))
	if errors.Is(err, fs.ErrNotExist) && s.opts.Fetch != nil {
		return s.fetch(ctx, sc)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: audio of %s/%s", cdr.ErrNotFound, tenant, id)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open recording %s/%s: %w", tenant, id, err)
	}
	return f, sc, nil
}

// fetch copies the audio of sc from the object store into an unlinked
// temporary file, so that it is served like a local one (Range included).
func (s *Store) fetch(ctx context.Context, sc *Sidecar) (io.ReadSeekCloser, *Sidecar, error) {
	rc, err := s.opts.Fetch(ctx, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("recording %s/%s from the store: %w", sc.Tenant, sc.ID, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(s.root, ".fetch-*")
	if err != nil {
		return nil, nil, fmt.Errorf("recording %s/%s: %w", sc.Tenant, sc.ID, err)
	}
	os.Remove(f.Name()) // gone when closed
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("recording %s/%s from the store: %w", sc.Tenant, sc.ID, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("recording %s/%s: %w", sc.Tenant, sc.ID, err)
	}
	return f, sc, nil
}

func (s *Store) find(ctx context.Context, tenant, id string) (string, *Sidecar, error) {
	if err := cdr.ValidateTenant(tenant); err != nil {
		return "", nil, fmt.Errorf("%w: %w", cdr.ErrNotFound, err)
	}
	t, err := cdr.ID(id).Time()
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", cdr.ErrNotFound, err)
	}
	local := t.In(s.opts.Location(tenant))
	var tried []string
	for _, at := range []time.Time{local, local.AddDate(0, 0, -1), local.AddDate(0, 0, 1), t.UTC()} {
		dir := filepath.Join(s.root, at.Format("2006"), at.Format("01"), at.Format("02"))
		if slices.Contains(tried, dir) {
			continue
		}
		tried = append(tried, dir)
		if err := ctx.Err(); err != nil {
			return "", nil, err
		}
		sc, err := readSidecar(filepath.Join(dir, id+sidecarExt))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read recording %s/%s: %w", tenant, id, err)
		}
		if sc.ID != id || sc.Tenant != tenant {
			return "", nil, cdr.ErrNotFound
		}
		return dir, sc, nil
	}
	return "", nil, cdr.ErrNotFound
}

// fingerprint binds a cursor to the filters of the query that made it.
func fingerprint(q Query) [8]byte {
	var b strings.Builder
	ts := slices.Clone(q.Tenants)
	slices.Sort(ts)
	b.WriteString(strings.Join(ts, ","))
	for _, v := range []string{q.Tenant, q.Number, q.Extension} {
		b.WriteByte(0)
		b.WriteString(v)
	}
	for _, t := range []*time.Time{q.From, q.To} {
		b.WriteByte(0)
		if t != nil {
			b.WriteString(strconv.FormatInt(t.UnixNano(), 10))
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	var fp [8]byte
	copy(fp[:], sum[:])
	return fp
}

// encodeCursor is the listing's cursor after position p, in the call log's
// format.
func (s *Store) encodeCursor(p pos, fp [8]byte) string {
	return cdr.Cursor{Key: s.opts.CursorKey}.Encode(p.ms, cdr.ID(p.id), fp)
}

// decodeCursor checks a cursor: any damage, any edit and a cursor of
// another query give cdr.ErrBadCursor.
func (s *Store) decodeCursor(c string, fp [8]byte) (pos, error) {
	ms, id, err := cdr.Cursor{Key: s.opts.CursorKey}.Decode(c, fp)
	return pos{ms: ms, id: string(id)}, err
}
