package cdr

import (
	"golang.org/x/sys/unix"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"pbx/appliance/datadir"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and limits.
const (
	// DefaultLimit is the page size when Query.Limit is zero.
	DefaultLimit = 100
	// MaxLimit is the largest accepted Query.Limit.
	MaxLimit = 1000
	// DefaultCacheEntries bounds how many parsed index lines List keeps in
	// memory across all days.
	DefaultCacheEntries = 300_000
	// DefaultRecentDays is how many of each tenant's newest days startup
	// recovery checks in full (stray files, torn and missing index lines).
	DefaultRecentDays = 3
	// SweepInterval is the retention janitor's period.
	SweepInterval = 24 * time.Hour

	cdrDir      = "cdr"
	inflightDir = "inflight"
	recordExt   = ".json"
	tmpExt      = ".tmp"
	dirMode     = 0o750
	fileMode    = 0o640
)

// Options configures a Store.
type Options struct {
	// DataDir is the PBX data directory; records live under
	// <DataDir>/<tenant>/cdr/.
	DataDir string
	// Location returns the tenant's time zone, which decides the day
	// directory of a record (the tenant's local date of its start). Nil, or a
	// nil result, means the host's zone.
	Location func(tenant string) *time.Location
	// Retention: day directories older than this are removed by the janitor.
	// Zero keeps records forever.
	Retention time.Duration
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// CursorKey authenticates cursors. Nil uses a built-in key, which still
	// detects damaged and edited cursors but not forged ones; a key from
	// configuration keeps cursors valid across restarts while refusing
	// forgeries.
	CursorKey []byte
	// CacheEntries bounds the parsed index lines kept in memory; zero means
	// DefaultCacheEntries.
	CacheEntries int
	// RecentDays is how many newest days per tenant Recover checks in full;
	// zero means DefaultRecentDays.
	RecentDays int
	// MaxPending bounds the records kept in memory while writes fail; zero
	// means DefaultMaxPending.
	MaxPending int
	// RetryMin and RetryMax bound the delay between attempts to write
	// pending records; zero means DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// MarkerRefresh is how often Run sets the modification time of every
	// in-flight marker to now; zero means DefaultMarkerRefresh.
	MarkerRefresh time.Duration
	// MaxOpenFiles bounds the marker files the store keeps open between
	// uses (each saves an open by path per answered call); zero means
	// DefaultMaxOpenFiles, negative none. The process's open file limit
	// must leave room for them beside its sockets.
	MaxOpenFiles int
}

// Store writes, recovers, expires and lists the call records of every
// tenant under one data directory. It is safe for concurrent use.
type Store struct {
	opts Options
	log  *slog.Logger
	root string

	locks        sync.Map                  // index path -> *sync.Mutex serialising appends and rewrites
	inflightDirs sync.Map                  // tenant -> *tenantDir, its in-flight directory (inflightDir)
	lastInflight atomic.Pointer[tenantDir] // the one last asked for
	cache        *dayCache

	markersDirty atomic.Bool // a marker was written since the last syncMarkers
	spares       spares      // files of removed markers, reused for new ones
	dirSyncs     dirSyncs    // grouped fsyncs of day directories after commits

	journal   atomic.Pointer[journal] // the commit journal (journal.go); nil until first used or when it cannot open
	jOnce     sync.Once
	jReplayed atomic.Bool // the journal left by a previous run was replayed

	commits committer // the commits of CommitThen waiting for the disk

	bl *backlog // records that failed to be written, and the markers to refresh
	// fault, when set (tests), is asked before each write step ("marker",
	// "record", "index", "unmark") and fails it with the error it returns.
	fault func(step, path string) error

	stats commitStats

	lastDayMu sync.Mutex
	lastDay   map[string]lastDay // by tenant (dayDir)
}

// New returns a Store over opts.DataDir. It creates nothing on disk.
func New(opts Options, log *slog.Logger) (*Store, error) {
	if opts.DataDir == "" {
		return nil, errors.New("cdr: data directory not set")
	}
	if opts.Retention < 0 {
		return nil, fmt.Errorf("cdr: negative retention %v", opts.Retention)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CacheEntries <= 0 {
		opts.CacheEntries = DefaultCacheEntries
	}
	if opts.RecentDays <= 0 {
		opts.RecentDays = DefaultRecentDays
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = opts.RetryMin
	}
	if opts.MarkerRefresh <= 0 {
		opts.MarkerRefresh = DefaultMarkerRefresh
	}
	if opts.MaxOpenFiles == 0 {
		opts.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if len(opts.CursorKey) == 0 {
		opts.CursorKey = []byte("pbx cdr cursor v1")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("cdr: data directory: %w", err)
	}
	s := &Store{opts: opts, log: log, root: root, cache: newDayCache(opts.CacheEntries), bl: newBacklog()}
	s.spares.limit = max(opts.MaxOpenFiles, 0)
	s.commits.idle.L = &s.commits.mu
	return s, nil
}

func (s *Store) location(tenant string) *time.Location {
	if s.opts.Location != nil {
		if l := s.opts.Location(tenant); l != nil {
			return l
		}
	}
	return time.Local
}

func (s *Store) tenantDir(tenant string) string {
	return filepath.Join(s.root, tenant, cdrDir)
}

// inflightDir is the in-flight directory of tenant, made once a tenant:
// a call asks for it, or for a path in it, three or four times. The last
// one asked for is at hand without a look-up (the map's was about 1 us a
// call in the pbx at 500 calls/s, perf).
func (s *Store) inflightDir(tenant string) string {
	if l := s.lastInflight.Load(); l != nil && l.tenant == tenant {
		return l.dir
	}
	v, ok := s.inflightDirs.Load(tenant)
	if !ok {
		v, _ = s.inflightDirs.LoadOrStore(tenant, &tenantDir{tenant, filepath.Join(s.root, tenant, cdrDir, inflightDir)})
	}
	td := v.(*tenantDir)
	s.lastInflight.Store(td)
	return td.dir
}

// tenantDir is a directory of tenant.
type tenantDir struct{ tenant, dir string }

// inDir is the path of the file id+ext in dir, a clean directory; id has
// no separator (id+ext is a single path element), so no cleaning is needed.
func inDir(dir string, id ID, ext string) string {
	return dir + string(filepath.Separator) + string(id) + ext
}

// dayDir is the day directory of a record of tenant that started at t.
// The last one of each tenant is kept: a call's commit asks for it once
// or twice, and formatting it is a few allocations.
func (s *Store) dayDir(tenant string, t time.Time) string {
	d := dateOf(t.In(s.location(tenant)))
	s.lastDayMu.Lock()
	last, ok := s.lastDay[tenant]
	s.lastDayMu.Unlock()
	if ok && last.d == d {
		return last.dir
	}
	dir := s.dayDirOf(tenant, d)
	s.lastDayMu.Lock()
	if s.lastDay == nil {
		s.lastDay = map[string]lastDay{}
	}
	s.lastDay[tenant] = lastDay{d, dir}
	s.lastDayMu.Unlock()
	return dir
}

// lastDay is a tenant's day directory last asked for.
type lastDay struct {
	d   date
	dir string
}

func (s *Store) dayDirOf(tenant string, d date) string {
	return filepath.Join(s.tenantDir(tenant), d.path())
}

// MarkerPath is where the in-flight marker of a record lives.
func (s *Store) MarkerPath(tenant string, id ID) string {
	// Joined and cleaned only when id has a separator: any other id plus
	// recordExt is one path element, which inDir joins the same way
	// without id.Validate's time parse on every call.
	if strings.ContainsAny(string(id), `/`+string(filepath.Separator)) {
		return filepath.Join(s.inflightDir(tenant), string(id)+recordExt)
	}
	return inDir(s.inflightDir(tenant), id, recordExt)
}

// RecordPath is where a record of tenant with id that started at start is
// committed.
func (s *Store) RecordPath(tenant string, id ID, start time.Time) string {
	return filepath.Join(s.dayDir(tenant, start), string(id)+recordExt)
}

// Answered writes (or rewrites) the in-flight marker of an answered call:
// the record so far, under <tenant>/cdr/inflight/<id>.json, atomically. If
// the process dies before Commit, Recover promotes the marker to an
// incomplete record, ending at the marker's modification time, which Run
// refreshes every Options.MarkerRefresh while the call lasts.
//
// A marker that cannot be written (a full disk) is kept in memory and
// retried like a pending record; Answered then returns nil. It returns an
// error for an invalid record, and one wrapping ErrBacklogFull when the
// backlog is full.
func (s *Store) Answered(r *Record) error {
	if err := r.validate(false); err != nil {
		return err
	}
	n := r.normalize()
	k := recKey{n.Tenant, n.ID}
	defer s.bl.order(n.ID)()
	if p := s.bl.get(k); p != nil && p.stage != stageMarker {
		return nil // the call has ended already; its record is pending
	}
	path := s.MarkerPath(n.Tenant, n.ID)
	s.track(k, path)
	start := time.Now()
	err := s.writeMarker(&n, path)
	s.stats.marker.observe(time.Since(start))
	if err != nil {
		return s.keep(&n, stageMarker, err)
	}
	if s.bl.n.Load() > 0 {
		s.forget(k) // an older version of this marker was pending
		s.wrote()
	}
	return nil
}

// encodeBufs holds the buffers markers and record files are encoded into
// on their way to disk (the journal copies what it keeps), so that a
// call allocates none.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// writeMarker writes the in-flight marker of n, a normalized record, at
// path (MarkerPath).
func (s *Store) writeMarker(n *Record, path string) error {
	dir := s.inflightDir(n.Tenant)
	if err := s.step("marker", dir); err != nil {
		return fmt.Errorf("write marker %s: %w", n.ID, err)
	}
	buf := encodeBufs.Get().(*[]byte)
	defer encodeBufs.Put(buf)
	data, err := appendRecord((*buf)[:0], n)
	if err != nil {
		return fmt.Errorf("encode marker %s: %w", n.ID, err)
	}
	// The marker is renamed into place without an fsync: it is on the path of
	// the caller's 200 OK, and a killed process loses nothing the kernel holds.
	// Against a power cut, Run syncs the file system behind written markers
	// every MarkerSyncInterval, one syscall for every marker in between.
	data = append(data, '\n')
	*buf = data[:0] // kept grown
	if s.spares.putMarker(dir, path, data) {
		s.markersDirty.Store(true)
		return nil
	}
	// No spare could be written (the directory may be missing); the file
	// held open for an earlier version of the marker is replaced.
	if f := s.spares.release(path); f.fd >= 0 {
		unix.Close(f.fd)
	}
	if err := ensureDir(dir); err != nil {
		return fmt.Errorf("marker directory: %w", err)
	}
	if err := writeAtomicSync(path, data, false, nil); err != nil {
		return fmt.Errorf("write marker %s: %w", n.ID, err)
	}
	s.markersDirty.Store(true)
	return nil
}

// step asks the test fault hook, if any, whether a write step fails.
func (s *Store) step(name, path string) error {
	if s.fault == nil {
		return nil
	}
	return s.fault(name, path)
}

// MarkerSyncInterval bounds how long an in-flight marker may sit in the page
// cache before it is flushed to disk.
const MarkerSyncInterval = 250 * time.Millisecond

// syncMarkers flushes markers written since the last call to disk.
// It is also the commit journal's checkpoint: the record files of the
// entries appended before it started are durable once it returns.
func (s *Store) syncMarkers() error {
	j := s.journal.Load()
	markers := s.markersDirty.Swap(false)
	if !markers && (j == nil || !j.dirty()) {
		return nil
	}
	var upTo uint64
	if j != nil {
		upTo = j.seq.Load()
	}
	if err := syncFS(s.opts.DataDir); err != nil {
		return err
	}
	if j != nil {
		j.checkpointed(upTo)
	}
	return nil
}

// Commit writes the final record of a call, answered or not: one write of
// <id>.json.tmp in the day directory, one rename to <id>.json, one append
// to the commit journal and one fdatasync of it (shared with the commits
// running at the same time, journal.go; without the journal, an fsync of
// the file before the rename and of the directory after), then one index
// line appended to the day's index.jsonl, then the in-flight marker (if
// any) removed. The index line is
// appended before the marker goes so that a crash between the two leaves a
// marker whose record is committed, which recovery repairs; a crash after
// the rename and before the append of an unanswered call leaves a record
// without its line, which recovery of the newest days and repair add.
//
// A record that cannot be written (a full disk) is kept in memory and
// retried by Run, from the step that failed, until it is written once;
// Commit then returns nil and Backlog reports it. Commit returns an error
// for an invalid record, ErrCommitted for a record committed (or pending)
// already, and an error wrapping ErrBacklogFull when the backlog is full.
func (s *Store) Commit(r *Record) error {
	if err := r.validate(true); err != nil {
		return err
	}
	n := r.normalize()
	k := recKey{n.Tenant, n.ID}
	defer s.bl.order(n.ID)()
	s.untrack(k) // the call has ended: its marker's time must stay put
	retry := false
	if p := s.bl.get(k); p != nil {
		if p.stage != stageMarker {
			return fmt.Errorf("%w: %s/%s (pending)", ErrCommitted, n.Tenant, n.ID)
		}
		retry = true // the marker is pending, not the record
	}
	st := stageRecord
	start := time.Now()
	if err := s.commitFrom(&n, &st, false); err != nil {
		if errors.Is(err, ErrCommitted) {
			return err
		}
		if st == stageRecord {
			s.pinMarker(&n) // a crash before the retry recovers the right end
		}
		return s.keep(&n, st, err)
	}
	s.stats.observe(time.Since(start))
	if retry {
		s.forget(k)
	}
	s.wrote()
	return nil
}

// commitFrom carries the commit of n, a normalized record, on from step
// *st, advancing *st past each step done, so that a retry after a failure
// writes neither the file nor the index line twice. On a retry, a record
// file already in place is one this store wrote (the rename succeeded, the
// directory sync did not).
func (s *Store) commitFrom(n *Record, st *stage, retry bool) error {
	dir := s.dayDir(n.Tenant, n.Start)
	if *st == stageRecord {
		final := inDir(dir, n.ID, recordExt)
		if _, err := os.Lstat(final); err == nil {
			if !retry {
				return fmt.Errorf("%w: %s/%s", ErrCommitted, n.Tenant, n.ID)
			}
		} else if err := s.writeRecord(n, dir, final); err != nil {
			return err
		}
		*st = stageIndex
	}
	if *st == stageIndex {
		if err := s.step("index", dir); err != nil {
			return fmt.Errorf("index record %s: %w", n.ID, err)
		}
		e := n.Entry()
		if err := s.appendIndex(dir, e.AppendLine(nil)); err != nil {
			return fmt.Errorf("index record %s: %w", n.ID, err)
		}
		*st = stageCleanup
	}
	marker := s.MarkerPath(n.Tenant, n.ID)
	if err := s.step("unmark", marker); err != nil {
		return fmt.Errorf("remove marker %s: %w", n.ID, err)
	}
	if err := s.spares.removeMarker(marker); err != nil {
		return fmt.Errorf("remove marker %s: %w", n.ID, err)
	}
	return nil
}

// writeRecord writes the record file final in dir durably.
func (s *Store) writeRecord(n *Record, dir, final string) error {
	j, seq, err := s.writeFile(n, dir, final)
	if err != nil {
		return err
	}
	return s.makeDurable(n, dir, final, j, seq)
}

// writeFile writes the record file final in dir and, when the commit
// journal is open, appends its entry there, returning the journal and the
// entry's seq: the file is then in place but durable only once makeDurable
// returns. Without the journal (or for a record too large for it) the
// file is made durable on its own, and j is nil.
func (s *Store) writeFile(n *Record, dir, final string) (j *journal, seq uint64, err error) {
	if err := s.step("record", final); err != nil {
		return nil, 0, fmt.Errorf("write record %s: %w", n.ID, err)
	}
	buf := encodeBufs.Get().(*[]byte)
	defer encodeBufs.Put(buf)
	data, err := appendRecord((*buf)[:0], n)
	if err != nil {
		return nil, 0, fmt.Errorf("encode record %s: %w", n.ID, err)
	}
	data = append(data, '\n')
	*buf = data[:0] // kept grown
	// The day directory is made when a write finds it missing, which
	// spares a stat a call.
	write := func(durable bool) error {
		if _, err := os.Lstat(final); err == nil {
			return fmt.Errorf("%w: %s/%s", ErrCommitted, n.Tenant, n.ID)
		}
		err := writeAtomicSync(final, data, durable, &s.dirSyncs)
		if errors.Is(err, fs.ErrNotExist) {
			if err := ensureDir(dir); err != nil {
				return fmt.Errorf("day directory: %w", err)
			}
			err = writeAtomicSync(final, data, durable, &s.dirSyncs)
		}
		if err != nil {
			return fmt.Errorf("write record %s: %w", n.ID, err)
		}
		return nil
	}
	if j = s.journalFor(); j == nil {
		return nil, 0, write(true)
	}
	rel, err := relUnder(s.root, final)
	if err != nil {
		return nil, 0, fmt.Errorf("write record %s: %w", n.ID, err)
	}
	j.begin() // a journal sync starting now waits for this append
	ok, err := s.writeFromSpare(n.Tenant, dir, final, data)
	if err != nil {
		j.end()
		return nil, 0, fmt.Errorf("%w: %s/%s", ErrCommitted, n.Tenant, n.ID)
	}
	if !ok {
		if err := write(false); err != nil {
			j.end()
			return nil, 0, err
		}
	}
	if seq, err = j.add(rel, data); err == nil {
		return j, seq, nil
	}
	if !errors.Is(err, errEntryTooLarge) {
		s.log.Warn("commit journal failed; record synced on its own", "id", n.ID, "err", err)
	}
	return nil, 0, s.syncRecordFile(n, dir, final)
}

// relUnder is filepath.Rel(root, p) for root, a clean absolute
// directory, and p, a clean path: p without root's prefix when it is
// under root (a record file's path, on every commit: Rel cleans both and
// allocates), else what Rel returns.
func relUnder(root, p string) (string, error) {
	if len(p) > len(root)+1 && p[len(root)] == filepath.Separator && p[:len(root)] == root {
		return p[len(root)+1:], nil
	}
	return filepath.Rel(root, p)
}

// writeFromSpare writes the record file final in dir, not durably, from
// a spare file of the tenant's in-flight directory, which the committer
// keeps stocked (spareStock): no inode is allocated. It reports false,
// having written nothing, when none could be written, and errCommitted
// when final exists (the rename does not replace it: no lookup first).
func (s *Store) writeFromSpare(tenant, dir, final string, data []byte) (bool, error) {
	return s.spares.putRecord(s.inflightDir(tenant), final, data, s.dirSyncs.target(dir))
}

// makeDurable returns once the record file final that writeFile wrote is
// durable: an fdatasync of journal j covers its entry seq (nil j: it is
// already), or, when that fails, the file and its directory are synced.
func (s *Store) makeDurable(n *Record, dir, final string, j *journal, seq uint64) error {
	if j == nil {
		return nil
	}
	err := j.sync(seq)
	if err == nil {
		return nil
	}
	s.log.Warn("commit journal failed; record synced on its own", "id", n.ID, "err", err)
	return s.syncRecordFile(n, dir, final)
}

// syncRecordFile makes the record file final, in place, and its name in
// dir durable the old way: an fsync of each.
func (s *Store) syncRecordFile(n *Record, dir, final string) error {
	if err := syncFile(final); err != nil {
		return fmt.Errorf("write record %s: %w", n.ID, err)
	}
	if err := s.dirSyncs.sync(dir); err != nil {
		return fmt.Errorf("write record %s: %w", n.ID, err)
	}
	return nil
}

func (s *Store) indexLock(path string) *sync.Mutex {
	if m, ok := s.locks.Load(path); ok {
		return m.(*sync.Mutex)
	}
	m, _ := s.locks.LoadOrStore(path, new(sync.Mutex))
	return m.(*sync.Mutex)
}

// appendIndex appends complete lines to dir's index under the file's lock,
// in one O_APPEND write. When the file does not end in a newline (a torn
// line left by a crash) a newline is written first, so the torn fragment
// stays a line of its own that readers skip and repair removes. A failed
// write is cut back to the previous size.
func (s *Store) appendIndex(dir string, lines []byte) error {
	path := filepath.Join(dir, IndexFile)
	mu := s.indexLock(path)
	mu.Lock()
	defer mu.Unlock()
	fd, err := sysOpen(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT, fileMode)
	if err != nil {
		return err
	}
	err = appendLines(fd, path, lines)
	if cerr := sysClose(fd, path); err == nil {
		err = cerr
	}
	return err
}

// appendLines is appendIndex on the open index fd.
func appendLines(fd int, path string, lines []byte) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	size := st.Size
	if size > 0 {
		var last [1]byte
		if n, err := unix.Pread(fd, last[:], size-1); err != nil || n != 1 {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if last[0] != '\n' {
			lines = append([]byte{'\n'}, lines...)
		}
	}
	if err := sysWriteAt(fd, path, lines, -1); err != nil {
		_ = unix.Ftruncate(fd, size)
		return err
	}
	return nil
}

// writeAtomic writes data to path through path+".tmp": write, fsync,
// rename, fsync of the directory.
func writeAtomic(path string, data []byte) error {
	return writeAtomicSync(path, data, true, nil)
}

// writeAtomicSync writes data beside path and renames it into place; with
// durable it fsyncs the file before the rename and the directory after,
// through ds (grouped with concurrent writers) when not nil.
func writeAtomicSync(path string, data []byte, durable bool, ds *dirSyncs) error {
	tmp := path + tmpExt
	var ns *sync.Mutex
	if ds != nil {
		ns = &ds.of(filepath.Dir(path)).ns
		ns.Lock()
	}
	fd, err := sysOpen(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, fileMode)
	if ns != nil {
		ns.Unlock()
	}
	if err != nil {
		return err
	}
	err = sysWriteAt(fd, tmp, data, -1)
	if err == nil && durable {
		err = sysFsync(fd, tmp)
	}
	if cerr := sysClose(fd, tmp); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if ns != nil {
		ns.Lock()
	}
	err = sysRename(tmp, path)
	if ns != nil {
		ns.Unlock()
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if !durable {
		return nil
	}
	if ds != nil {
		return ds.sync(filepath.Dir(path))
	}
	return datadir.SyncDir(filepath.Dir(path))
}

// syncFS flushes the whole file system holding dir (syncfs(2)).
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return syncfs(int(d.Fd()))
}

// ensureDir creates dir and any missing parents, fsyncing each parent whose
// entries changed so that a new day directory survives a power cut.
func ensureDir(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := ensureDir(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, dirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	if filepath.Base(dir) == cdrDir {
		markTopDir(dir) // a tenant's cdr directory, made before its children
	}
	return datadir.SyncDir(parent)
}

// readRecord reads and decodes a record or marker file.
func readRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Base(path), err)
	}
	return &r, nil
}
