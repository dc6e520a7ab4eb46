package cdr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pbx/appliance/datadir"
	"pbx/sipcore/calls"
)

// ActionKind names one change recovery or repair makes (or, in a dry run,
// would make).
type ActionKind string

// Action kinds.
const (
	// ActPromoted: an in-flight marker without a committed record became an
	// incomplete record.
	ActPromoted ActionKind = "promoted"
	// ActMarkerDropped: an in-flight marker whose record is committed was
	// removed.
	ActMarkerDropped ActionKind = "marker_dropped"
	// ActTmpCommitted: a complete <id>.json.tmp left by a crash between
	// fsync and rename was renamed into place.
	ActTmpCommitted ActionKind = "tmp_committed"
	// ActTmpRemoved: a temporary file that holds nothing to keep was removed.
	ActTmpRemoved ActionKind = "tmp_removed"
	// ActIndexTruncated: a torn last index line (crash mid-append) was cut.
	ActIndexTruncated ActionKind = "index_truncated"
	// ActIndexLineAdded: a record missing from its day's index got its line.
	ActIndexLineAdded ActionKind = "index_line_added"
	// ActIndexRewritten: an index with damaged, duplicate or orphan lines was
	// rewritten from its valid lines and the record files.
	ActIndexRewritten ActionKind = "index_rewritten"
	// ActUnreadable: a file that could not be understood was left in place
	// for an operator to look at.
	ActUnreadable ActionKind = "unreadable"
)

// Action is one change made by Recover or Repair.
type Action struct {
	Kind   ActionKind `json:"kind"`
	Tenant string     `json:"tenant"`
	ID     ID         `json:"id,omitempty"`
	Path   string     `json:"path"` // relative to the data directory
	Detail string     `json:"detail,omitempty"`
}

func (a Action) String() string {
	s := fmt.Sprintf("%s: %s", a.Kind, a.Path)
	if a.Detail != "" {
		s += " (" + a.Detail + ")"
	}
	return s
}

// RepairOptions selects what Repair looks at.
type RepairOptions struct {
	// Full checks every day directory; otherwise only each tenant's newest
	// RecentDays days and the days in-flight markers point to.
	Full bool
	// DryRun reports the actions without changing anything.
	DryRun bool
	// Progress, when set, is called after each day with the days done and
	// the days to do.
	Progress func(done, total int)
}

// Recover is the startup pass, run before any listener opens: it promotes
// or drops in-flight markers, resolves temporary files, and repairs torn and
// missing index lines in the newest days and the days markers point to.
//
// A write that fails (a full disk) does not stop the start: a promoted
// record that cannot be written is kept pending like any other (its marker
// stays until it is), and an index that cannot be repaired is logged and
// left for the next start or an offline Repair.
func (s *Store) Recover(ctx context.Context) ([]Action, error) {
	acts, err := s.repair(ctx, RepairOptions{}, true)
	for _, a := range acts {
		s.log.Info("call record recovery", "tenant", a.Tenant, "action", string(a.Kind), "path", a.Path, "detail", a.Detail)
	}
	return acts, err
}

// Repair does what Recover does, over every day with Full, and can run as
// a dry run. It is idempotent: a second run reports no actions.
func (s *Store) Repair(ctx context.Context, opts RepairOptions) ([]Action, error) {
	return s.repair(ctx, opts, false)
}

// repair is Repair; tolerant keeps going past write failures (Recover).
func (s *Store) repair(ctx context.Context, opts RepairOptions, tolerant bool) ([]Action, error) {
	// The commit journal first: it restores committed records a power cut
	// lost, which the marker and index checks below then see.
	jacts, jdays, err := s.replayJournal(opts.DryRun)
	if err != nil {
		if !tolerant {
			return jacts, err
		}
		s.log.Error("commit journal not replayed; left for the next start", "err", err)
	}
	tenants, err := s.tenants()
	if err != nil {
		return nil, err
	}
	type work struct {
		tenant string
		days   []day
		marks  []marker
	}
	var all []work
	total := 0
	for _, t := range tenants {
		if !opts.DryRun {
			markTopDir(s.tenantDir(t)) // one made by an older version
		}
		days, err := s.listDays(t, date{}, date{})
		if err != nil {
			return nil, fmt.Errorf("list days of %s: %w", t, err)
		}
		if !opts.Full && len(days) > s.opts.RecentDays {
			days = days[:s.opts.RecentDays]
		}
		for _, d := range jdays[t] {
			if !containsDay(days, d) {
				days = append(days, d)
			}
		}
		marks, err := s.scanMarkers(t)
		if err != nil {
			return nil, err
		}
		for _, m := range marks {
			if m.rec == nil {
				continue
			}
			d := s.dayFor(t, m.rec.Start)
			if !slices.ContainsFunc(days, func(x day) bool { return x.dir == d.dir }) {
				days = append(days, d)
			}
		}
		all = append(all, work{t, days, marks})
		total += len(days)
	}
	out := jacts
	done := 0
	for _, w := range all {
		r := repairer{s: s, tenant: w.tenant, dry: opts.DryRun, tolerant: tolerant, pending: map[string]map[ID]*Entry{}}
		// Temporary files first: a complete <id>.json.tmp is the final form
		// of a record and beats its marker.
		for _, d := range w.days {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			if err := r.tmpFiles(d); err != nil {
				return append(out, r.acts...), err
			}
		}
		if err := r.markerFiles(w.marks); err != nil {
			return append(out, r.acts...), err
		}
		for _, d := range w.days {
			if err := ctx.Err(); err != nil {
				return append(out, r.acts...), err
			}
			if err := r.index(d); err != nil {
				if !tolerant || ctx.Err() != nil {
					return append(out, r.acts...), err
				}
				s.log.Error("call record index not repaired; left for the next start", "tenant", w.tenant, "day", d.date.String(), "err", err)
			}
			done++
			if opts.Progress != nil {
				opts.Progress(done, total)
			}
		}
		out = append(out, r.acts...)
	}
	return out, nil
}

func (s *Store) dayFor(tenant string, start time.Time) day {
	d := dateOf(start.In(s.location(tenant)))
	return day{tenant: tenant, date: d, dir: s.dayDirOf(tenant, d)}
}

type marker struct {
	id    ID
	path  string
	rec   *Record // nil when unreadable
	mod   time.Time
	spare bool // a marker file kept for reuse (spare.go), no marker
}

// scanMarkers lists a tenant's in-flight directory. Stray temporary files
// are reported by markerFiles; spare files (spare.go) are listed to be
// removed.
func (s *Store) scanMarkers(tenant string) ([]marker, error) {
	dir := s.inflightDir(tenant)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read in-flight markers of %s: %w", tenant, err)
	}
	var out []marker
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		m := marker{path: filepath.Join(dir, name)}
		if strings.HasPrefix(name, spareName) {
			m.spare = true
			out = append(out, m)
			continue
		}
		if strings.HasSuffix(name, tmpExt) {
			out = append(out, m) // id empty: a stray temporary file
			continue
		}
		if !strings.HasSuffix(name, recordExt) {
			continue
		}
		m.id = ID(strings.TrimSuffix(name, recordExt))
		if m.id.Validate() != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		m.mod = fi.ModTime()
		if r, err := readRecord(m.path); err == nil && r.Tenant == tenant && r.validate(false) == nil {
			// Another call's record under this name: a committed call's
			// marker the next marker was written into (spares.retire), the
			// process killed before its rename. It is that call's marker.
			m.id, m.rec = r.ID, r
		}
		out = append(out, m)
	}
	return out, nil
}

type repairer struct {
	s        *Store
	tenant   string
	dry      bool
	tolerant bool // a promotion that cannot be written is kept pending
	acts     []Action
	// pending: in a dry run, the records that would exist in each day
	// directory. A nil entry: its line would be written with it (a promoted
	// marker); otherwise the line the index check would add.
	pending map[string]map[ID]*Entry
}

func (r *repairer) act(kind ActionKind, path string, id ID, detail string) {
	rel, err := filepath.Rel(r.s.root, path)
	if err != nil {
		rel = path
	}
	r.acts = append(r.acts, Action{Kind: kind, Tenant: r.tenant, ID: id, Path: rel, Detail: detail})
}

// tmpFiles resolves the temporary files of one day directory.
func (r *repairer) tmpFiles(d day) error {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read %s: %w", d.dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, tmpExt) {
			continue
		}
		path := filepath.Join(d.dir, name)
		base := strings.TrimSuffix(name, tmpExt)
		id := ID(strings.TrimSuffix(base, recordExt))
		if !strings.HasSuffix(base, recordExt) || id.Validate() != nil {
			if err := r.remove(path); err != nil {
				return err
			}
			r.act(ActTmpRemoved, path, "", "stray temporary file")
			continue
		}
		final := filepath.Join(d.dir, base)
		if _, err := os.Lstat(final); err == nil {
			if err := r.remove(path); err != nil {
				return err
			}
			r.act(ActTmpRemoved, path, id, "record already committed")
			continue
		}
		rec, err := readRecord(path)
		if err != nil || rec.ID != id || rec.Tenant != r.tenant || rec.validate(true) != nil ||
			r.s.dayFor(r.tenant, rec.Start).dir != d.dir {
			if err := r.remove(path); err != nil {
				return err
			}
			r.act(ActTmpRemoved, path, id, "incomplete write")
			continue
		}
		if !r.dry {
			if err := syncFile(path); err != nil {
				return fmt.Errorf("sync %s: %w", path, err)
			}
			if err := os.Rename(path, final); err != nil {
				return fmt.Errorf("commit %s: %w", path, err)
			}
			if err := datadir.SyncDir(d.dir); err != nil {
				return err
			}
		}
		r.act(ActTmpCommitted, final, id, "write finished before the crash, rename done now")
		if r.dry {
			n := rec.normalize()
			e := n.Entry()
			r.pend(d.dir, id, &e)
		}
	}
	return nil
}

func (r *repairer) pend(dir string, id ID, e *Entry) {
	if r.pending[dir] == nil {
		r.pending[dir] = map[ID]*Entry{}
	}
	r.pending[dir][id] = e
}

func (r *repairer) remove(path string) error {
	if r.dry {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// committed reports whether the record of a marker is committed, looking
// in the day of its start and the adjacent days. A record file that cannot
// be read is not: a commit's file is synced through the commit journal,
// which replay has written again already, so such a file is the write of a
// commit a power cut interrupted; torn lists it, for the marker to replace.
func (r *repairer) committed(rec *Record, torn *[]string) bool {
	loc := r.s.location(r.tenant)
	local := rec.Start.In(loc)
	for _, t := range []time.Time{local, local.AddDate(0, 0, -1), local.AddDate(0, 0, 1)} {
		p := filepath.Join(r.s.dayDirOf(r.tenant, dateOf(t)), string(rec.ID)+recordExt)
		if _, err := os.Lstat(p); err == nil {
			if got, err := readRecord(p); err == nil && got.ID == rec.ID && got.Tenant == r.tenant {
				return true
			}
			*torn = append(*torn, p)
			continue
		}
		if _, ok := r.pending[r.s.dayDirOf(r.tenant, dateOf(t))][rec.ID]; ok {
			return true
		}
	}
	return false
}

// markerFiles promotes or drops the in-flight markers.
func (r *repairer) markerFiles(marks []marker) error {
	for _, m := range marks {
		var torn []string
		switch {
		case m.spare:
			// Not a marker: a previous run's spare, removed unreported.
			if err := r.remove(m.path); err != nil {
				return err
			}
		case m.id == "":
			if err := r.remove(m.path); err != nil {
				return err
			}
			r.act(ActTmpRemoved, m.path, "", "stray temporary marker")
		case m.rec == nil:
			r.act(ActUnreadable, m.path, m.id, "in-flight marker cannot be read; left in place")
		case r.committed(m.rec, &torn):
			if err := r.remove(m.path); err != nil {
				return err
			}
			r.act(ActMarkerDropped, m.path, m.id, "record already committed")
		default:
			rec := *m.rec
			rec.Incomplete = true
			rec.Cause = calls.CauseIncomplete
			rec.End = m.mod
			if rec.End.Before(rec.Start) {
				rec.End = rec.Start
			}
			if rec.Answer != nil && rec.Answer.After(rec.End) {
				rec.End = *rec.Answer
			}
			n := rec.normalize()
			d := r.s.dayFor(r.tenant, n.Start)
			detail := "incomplete record, end " + n.End.Format(time.RFC3339)
			for _, p := range torn {
				if err := r.remove(p); err != nil {
					return err
				}
				r.act(ActTmpRemoved, p, m.id, "record file torn by a crash before its commit; the marker replaces it")
			}
			if !r.dry {
				st := stageRecord
				if err := r.s.commitFrom(&n, &st, false); err != nil {
					if !r.tolerant || errors.Is(err, ErrCommitted) {
						return fmt.Errorf("promote marker %s: %w", m.id, err)
					}
					detail += ", pending: " + err.Error()
					if err := r.s.keep(&n, st, err); err != nil {
						detail = "not written, marker left for the next start: " + err.Error()
					}
				}
				if p := r.s.MarkerPath(r.tenant, m.id); p != m.path {
					// Promoted from under another call's name (scanMarkers).
					if err := r.remove(m.path); err != nil {
						return err
					}
				}
			} else {
				r.pend(d.dir, n.ID, nil)
			}
			r.act(ActPromoted, filepath.Join(d.dir, string(n.ID)+recordExt), m.id, detail)
		}
	}
	if !r.dry {
		r.s.spares.drop(r.s.inflightDir(r.tenant))
	}
	return nil
}

// index checks one day's index against its record files: a torn last line
// is cut, missing lines are appended, and damaged, duplicate or orphan
// lines make it rewritten.
func (r *repairer) index(d day) error {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read %s: %w", d.dir, err)
	}
	records := map[ID]bool{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, recordExt) {
			continue
		}
		id := ID(strings.TrimSuffix(name, recordExt))
		if id.Validate() == nil {
			records[id] = true
		}
	}
	for id := range r.pending[d.dir] {
		records[id] = true
	}
	path := d.index()
	mu := r.s.indexLock(path)
	mu.Lock()
	defer mu.Unlock()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	whole := data[:bytes.LastIndexByte(data, '\n')+1]
	torn := len(whole) < len(data)
	var keep [][]byte
	seen := map[ID]bool{}
	var bad, dups, orphans int
	for rest := whole; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		e, err := ParseLine(line)
		switch {
		case err != nil:
			bad++
		case seen[e.ID]:
			dups++
		case !records[e.ID]:
			orphans++
		default:
			seen[e.ID] = true
			keep = append(keep, line)
		}
	}
	missing := r.missingLines(d, records, seen)
	if bad+dups+orphans > 0 {
		var buf []byte
		for _, l := range keep {
			buf = append(buf, l...)
		}
		for _, e := range missing {
			buf = e.AppendLine(buf)
		}
		if !r.dry {
			if err := writeAtomic(path, buf); err != nil {
				return fmt.Errorf("rewrite %s: %w", path, err)
			}
		}
		r.act(ActIndexRewritten, path, "", fmt.Sprintf("%d damaged, %d duplicate, %d without record, %d missing lines", bad+btoi(torn), dups, orphans, len(missing)))
		return nil
	}
	if torn {
		if !r.dry {
			if err := os.Truncate(path, int64(len(whole))); err != nil {
				return fmt.Errorf("truncate %s: %w", path, err)
			}
		}
		r.act(ActIndexTruncated, path, "", fmt.Sprintf("torn last line of %d bytes removed", len(data)-len(whole)))
	}
	if len(missing) == 0 {
		return nil
	}
	var buf []byte
	for _, e := range missing {
		buf = e.AppendLine(buf)
		r.act(ActIndexLineAdded, path, e.ID, "")
	}
	if r.dry {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, fileMode)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		_ = os.Truncate(path, int64(len(whole)))
		return fmt.Errorf("append %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// missingLines are the entries of day d's records that its index does not
// list (seen), oldest first: a dry run's pending entry as it stands (none for
// a promoted marker, whose line comes with it), else the record file's; an
// unreadable record is reported and left out.
func (r *repairer) missingLines(d day, records, seen map[ID]bool) []Entry {
	var missing []Entry
	for id := range records {
		if seen[id] {
			continue
		}
		if e, ok := r.pending[d.dir][id]; ok {
			if e != nil {
				missing = append(missing, *e)
			}
			continue
		}
		rec, err := readRecord(filepath.Join(d.dir, string(id)+recordExt))
		if err == nil && (rec.ID != id || rec.Tenant != r.tenant) {
			err = errors.New("record names another id or tenant")
		}
		if err != nil {
			r.act(ActUnreadable, filepath.Join(d.dir, string(id)+recordExt), id, "record file cannot be read; no index line")
			continue
		}
		n := rec.normalize()
		missing = append(missing, n.Entry())
	}
	sortOldestFirst(missing)
	return missing
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
