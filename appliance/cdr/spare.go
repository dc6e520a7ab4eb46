package cdr

import (
	"errors"

	"golang.org/x/sys/unix"

	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxSpares bounds the spare marker files kept per in-flight directory:
// above the answered calls a tenant holds at once at its peak, so that
// the markers of the calls ending after a peak are parked, not removed
// (at most one 4 KiB block each). A removed marker's inode, freed, made
// every file created in its block group for minutes after cost more
// (ext4 without a journal skips recently freed inodes); with 256, each
// burst of more than 256 answered calls ending left that behind.
const maxSpares = 4096

// spareName prefixes the spare files: hidden, and neither a marker
// (recordExt) nor a stray temporary file (tmpExt) to recovery, which skips
// them.
const spareName = ".spare-"

// spares recycles the files of removed in-flight markers. Creating a file
// allocates an inode and removing one frees it, and on a busy file system
// (ext4 without a journal skips every recently freed inode) allocation is
// the largest cost of a call record; a call's marker is instead renamed to
// a spare name when the call is committed, and the next answered call's
// marker is written over it and renamed into place. The marker is still
// written whole before its rename, as a temporary file would be. A spare
// keeps the bytes of the marker it was (that call's record is committed
// beside it, in the tenant's own directory) until it is reused; recovery
// removes spares.
//
// Spare names are numbered per directory up to maxSpares; one left by a
// crash is replaced by the next rename onto its name.
type spares struct {
	mu   sync.Mutex
	dirs map[string]*spareDir
	// held are the files of the markers of calls in progress, by path,
	// kept open from the marker's write to its parking, so that neither
	// opens its file again; open counts the files held open here and in
	// the ready lists, bounded by limit (Options.MaxOpenFiles). Past the
	// limit a marker's file is closed but its entry kept, for its size:
	// the next marker written into it is padded to that, not cut.
	held  map[string]spare
	open  int
	limit int
}

// DefaultMaxOpenFiles bounds the open files spares keeps for markers (of
// calls in progress and parked) when Options.MaxOpenFiles is zero: beyond,
// a marker's file is closed after its write and opened again by path for
// the next (maxSpares bounds those). Opening a parked spare by its path was
// the largest cost of an answered call's marker on the reference machine
// (BenchmarkAnsweredCommit).
const DefaultMaxOpenFiles = 4096

type spareDir struct {
	ready []spare  // parked markers (spare names) on disk, free to take
	idle  []string // names free, holding no file of ours
	made  int      // names made so far
	stock string   // where new spares are created (stockPath); "" until the first
	fresh []spare  // empty files in stock, open, free to take
	made2 int      // names made in stock so far
	// dirFD and stockFD are the in-flight and stock directories, open
	// (-1: not yet), which renames and opens name files relative to: no
	// walk of the data directory's path each time. Neither is closed: a
	// spare may be using it (a stock directory removed by recovery leaves
	// its descriptor behind, once a start).
	dirFD, stockFD int
	rotations      int       // stock directories given up for slow creations
	rotated        time.Time // when the last was
	// retired are the markers of committed calls (durable, indexed)
	// still under their names, open or not, which the next answered
	// calls' markers are written into and renamed from (retire); aging
	// are those of the committer's previous batch, parked by the next.
	retired, aging []spare
}

// spare is a spare file: a parked marker, or a new empty file in the
// stock directory, open (fd) or not (-1), holding size bytes (-1: not
// known); dir is its directory, open (AT_FDCWD: not, path is used).
type spare struct {
	path string
	fd   int
	size int
	dir  int
}

// rel is the name of f relative to f.dir.
func (f spare) rel() string {
	if f.dir == unix.AT_FDCWD {
		return f.path
	}
	return filepath.Base(f.path)
}

func (sp *spares) dir(d string) *spareDir {
	if sp.dirs == nil {
		sp.dirs = map[string]*spareDir{}
	}
	sd := sp.dirs[d]
	if sd == nil {
		sd = &spareDir{dirFD: -1, stockFD: -1}
		sp.dirs[d] = sd
	}
	return sd
}

// openDir returns dir open (AT_FDCWD when it cannot be opened: a missing
// directory is tried again next time).
func (sp *spares) openDir(dir string) int {
	sp.mu.Lock()
	fd := sp.dir(dir).dirFD
	sp.mu.Unlock()
	if fd >= 0 {
		return fd
	}
	fd, err := sysOpen(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return unix.AT_FDCWD
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sd := sp.dir(dir)
	if sd.dirFD >= 0 {
		unix.Close(fd) // another opened it meanwhile
		return sd.dirFD
	}
	sd.dirFD = fd
	return fd
}

// take returns a parked spare of dir to write into, or false when there
// is none. The caller settles its name once done with it.
func (sp *spares) take(dir string) (spare, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	f, ok := popLast(&sp.dir(dir).ready)
	if ok && f.fd >= 0 {
		sp.open--
	}
	return f, ok
}

// name returns a spare name of dir holding no spare, or "" when every
// name holds one.
func (sp *spares) name(dir string) string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sd := sp.dir(dir)
	if p, ok := popLast(&sd.idle); ok {
		return p
	}
	if sd.made >= maxSpares {
		return ""
	}
	sd.made++
	return filepath.Join(dir, spareName+strconv.Itoa(sd.made))
}

// settle gives back name p of dir, taken by take or name: free again, no
// file of ours under it.
func (sp *spares) settle(dir, p string) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sd := sp.dir(dir)
	sd.idle = append(sd.idle, p)
}

// park makes f, a file of dir now under a spare name, ready to take,
// closing it when limit files are open.
func (sp *spares) park(dir string, f spare) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if f.fd >= 0 {
		if sp.open >= sp.limit {
			unix.Close(f.fd)
			f.fd = -1
		} else {
			sp.open++
		}
	}
	sd := sp.dir(dir)
	sd.ready = append(sd.ready, f)
}

// hold keeps f, the open file of the marker at path, until the marker is
// parked, closing the one held for an earlier version of it; f is closed
// instead when limit files are open (its size kept).
func (sp *spares) hold(path string, f spare) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if old, ok := sp.held[path]; ok {
		delete(sp.held, path)
		if old.fd >= 0 {
			unix.Close(old.fd)
			sp.open--
		}
	}
	if sp.open >= sp.limit {
		unix.Close(f.fd)
		f.fd = -1
	} else {
		sp.open++
	}
	if sp.held == nil {
		sp.held = map[string]spare{}
	}
	sp.held[path] = f
}

// release returns the file held for the marker at path (fd -1: not open;
// size -1: not known either).
func (sp *spares) release(path string) spare {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	f, ok := sp.held[path]
	if !ok {
		return spare{path: path, fd: -1, size: -1, dir: unix.AT_FDCWD}
	}
	delete(sp.held, path)
	if f.fd >= 0 {
		sp.open--
	}
	return f
}

// errCommitted reports a rename without replacement that found its
// target (a record file) in place.
var errCommitted = errors.New("target exists")

// writeInto writes data into spare f and renames it to path (holding ns,
// when not nil, for the rename; with noReplace, failing with errCommitted
// when path exists). The file is opened when f is not open, cut to
// length only when it may hold more than data, and with keep left open
// (returned, named path); otherwise closed. It reports false, having
// written nothing at path, when the spare is gone or cannot be written
// (it is then removed); the caller then writes the file the ordinary way.
//
// The rename names path relative to the directory open as pdir (AT_FDCWD:
// not open), or the whole path without replacement.
func writeInto(f spare, pdir int, path string, data []byte, noReplace, keep bool, to *dirTarget) (spare, bool, error) {
	// Overwritten in place and cut to length, not truncated to zero first:
	// on ext4 a truncation to zero frees the file's block (a discard request
	// with the discard mount option) and makes close start writeback of the
	// new data (auto_da_alloc), two block device requests per marker.
	var err error
	if f.fd < 0 {
		// f.size, when known, is what this store last wrote there.
		if f.fd, err = sysOpenAt(f.dir, f.rel(), f.path, unix.O_WRONLY, fileMode); err != nil {
			return spare{}, false, nil
		}
	}
	err = sysWriteAt(f.fd, f.path, data, 0)
	if err == nil && (f.size < 0 || f.size > len(data)) {
		err = unix.Ftruncate(f.fd, int64(len(data)))
	}
	if err == nil {
		switch {
		case noReplace && to != nil:
			err = renameNoReplaceAt(f.dir, f.rel(), f.path, to.acquire(), path)
			to.release(err)
		case noReplace:
			err = renameNoReplaceAt(f.dir, f.rel(), f.path, unix.AT_FDCWD, path)
		case pdir == unix.AT_FDCWD:
			err = sysRenameAt(f.dir, f.rel(), unix.AT_FDCWD, path, f.path, path)
		default:
			err = sysRenameAt(f.dir, f.rel(), pdir, filepath.Base(path), f.path, path)
		}
	}
	if err != nil {
		sysClose(f.fd, f.path)
		os.Remove(f.path)
		if errors.Is(err, errCommitted) {
			return spare{}, false, err
		}
		return spare{}, false, nil
	}
	if keep {
		return spare{path, f.fd, len(data), pdir}, true, nil
	}
	sysClose(f.fd, path) // written and in place: nothing left to report
	return spare{}, true, nil
}

// spareStock bounds how many new spares the committer keeps ready in each
// in-flight directory it has committed records of (four times the
// tenant's records in its last batch, at least 8), each an open file: a
// record file is written into a new spare and renamed into its day
// directory, so that the call's goroutine allocates no inode. Creating a
// file was most of the cost of a commit (ext4 skips recently freed inodes
// one by one), and under the day directory's lock (dirSync.ns) commits
// ending at once queued behind it: at 1,500 calls/s on a busy disk over a
// thousand call goroutines waited there, each holding its INVITE
// transaction.
const spareStock = 256

// refill creates empty spare files in the stock directory of dir until
// want (at most spareStock) are ready. It reports whether dir has spares
// of either kind.
func (sp *spares) refill(dir string, want int) bool {
	sp.mu.Lock()
	sd := sp.dir(dir)
	need := min(want, spareStock) - len(sd.fresh)
	sp.mu.Unlock()
	start, made := time.Now(), 0
	for range need {
		f, err := sp.create(dir)
		if err != nil {
			break
		}
		made++
		sp.mu.Lock()
		sd.fresh = append(sd.fresh, f)
		sp.mu.Unlock()
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if made >= 8 && time.Since(start) > time.Duration(made)*slowCreate &&
		sd.rotations < maxRotations && time.Since(sd.rotated) >= rotateEvery {
		// The stock directory's block group is busy: the next spares are
		// created in a new one, placed by another name.
		sd.stock, sd.stockFD = stockPath(dir), -1
		sd.rotations++
		sd.rotated = time.Now()
	}
	return len(sd.fresh)+len(sd.ready) > 0
}

// A refill whose creations took more than slowCreate each on average
// gives its stock directory up for a new one (at most maxRotations times
// a store, every rotateEvery): ext4 places a directory by its name's
// hash among the block groups with the fewest directories, which may be
// one whose inodes another run or process has just freed by the
// thousand, each creation there skipping them (120-200 us instead of
// about 10). The descriptor of the stock directory given up stays open,
// as spares made there may still use it.
var (
	slowCreate  = 60 * time.Microsecond // a variable for tests
	rotateEvery = 10 * time.Second      // a variable for tests
)

const maxRotations = 16

// create makes a new empty spare file in the stock directory of dir (the
// first one makes that directory, dir marked a top directory) and
// returns it, open.
func (sp *spares) create(dir string) (spare, error) {
	sp.mu.Lock()
	sd := sp.dir(dir)
	if sd.stock == "" {
		sd.stock = stockPath(dir)
	}
	sd.made2++
	stock, name, sfd := sd.stock, strconv.Itoa(sd.made2), sd.stockFD
	sp.mu.Unlock()
	p := filepath.Join(stock, name)
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL
	open := func() (spare, error) {
		if sfd < 0 {
			fd, err := sysOpen(p, flags, fileMode)
			return spare{p, fd, 0, unix.AT_FDCWD}, err
		}
		fd, err := sysOpenAt(sfd, name, p, flags, fileMode)
		return spare{p, fd, 0, sfd}, err
	}
	f, err := open()
	if errors.Is(err, fs.ErrNotExist) {
		// No stock directory yet, or recovery removed it.
		markTopDir(dir)
		if err := os.Mkdir(stock, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return spare{}, err
		}
		if fd, err := sysOpen(stock, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			sp.mu.Lock()
			sd.stockFD, sfd = fd, fd
			sp.mu.Unlock()
		}
		f, err = open()
	}
	if err != nil {
		return spare{}, err
	}
	return f, nil
}

// putMarker writes the marker data at path, in the in-flight directory
// dir, through a spare file of dir renamed there: one a committed call's
// marker left, else a new one (created on the spot when the stock is
// empty). The file is kept open until the marker is parked. It reports
// false, having written nothing at path, when none could be written; the
// caller then writes the file the ordinary way.
func (sp *spares) putMarker(dir, path string, data []byte) bool {
	dfd := sp.openDir(dir)
	if f, ok := sp.takeRetired(dir); ok && f.dir == dfd {
		// A committed call's marker, renamed to this one's name: its
		// removal and this marker's creation in one rename.
		kept, ok, _ := writeInto(f, dfd, path, padMarker(data, f.size), false, true, nil)
		if ok {
			sp.hold(path, kept)
			return true
		}
	} else if ok {
		sp.parkRetired(dir, []spare{f})
	}
	if f, ok := sp.take(dir); ok {
		name := f.path
		kept, ok, _ := writeInto(f, dfd, path, padMarker(data, f.size), false, true, nil)
		sp.settle(dir, name)
		if ok {
			sp.hold(path, kept)
			return true
		}
	}
	f, ok := sp.takeFresh(dir)
	if !ok {
		var err error
		if f, err = sp.create(dir); err != nil {
			return false
		}
	}
	kept, ok, _ := writeInto(f, dfd, path, data, false, true, nil)
	if ok {
		sp.hold(path, kept)
	}
	return ok
}

// maxMarkerPad bounds the spaces padMarker adds.
const maxMarkerPad = 512

// padMarker returns the marker data padded with spaces (JSON whitespace,
// which readers skip) to size, the length of the spare it is written
// into, when that is longer by at most maxMarkerPad: the spare is then
// overwritten whole, not cut to length with an ftruncate (one system call
// fewer for most markers, whose lengths differ by a few bytes).
func padMarker(data []byte, size int) []byte {
	if pad := size - len(data); pad > 0 && pad <= maxMarkerPad {
		data = slices.Grow(data, pad)
		for range pad {
			data = append(data, ' ')
		}
	}
	return data
}

// putRecord writes the record file data at path, in a day directory,
// through a spare file of dir renamed there (holding ns for the rename)
// only when path does not exist (errCommitted otherwise): a new one
// first (created on the spot when the stock is empty), so that the
// parked ones stay for the markers. It reports false, having written
// nothing at path, when none could be written; the caller then writes
// the file the ordinary way.
func (sp *spares) putRecord(dir, path string, data []byte, to *dirTarget) (bool, error) {
	f, ok := sp.takeFresh(dir)
	if !ok {
		var err error
		if f, err = sp.create(dir); err != nil {
			f.fd = -2
		}
	}
	if f.fd != -2 {
		if _, ok, err := writeInto(f, unix.AT_FDCWD, path, data, true, false, to); ok || err != nil {
			return ok, err
		}
	}
	if f, ok := sp.take(dir); ok {
		name := f.path
		_, ok, err := writeInto(f, unix.AT_FDCWD, path, data, true, false, to)
		sp.settle(dir, name)
		return ok, err
	}
	return false, nil
}

// takeFresh returns a new spare of dir's stock, or false when there is
// none.
func (sp *spares) takeFresh(dir string) (spare, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return popLast(&sp.dir(dir).fresh)
}

// retire hands over the in-flight marker at path, of a committed call
// (its record durable and indexed), with the file held for it: the next
// answered call's marker is written into it and renamed from its name
// (takeRetired), one rename where removing it and writing a new marker
// through a parked spare took two. A marker not taken by the committer's
// next batch is removed then (ageRetired). Until then it lingers under
// its name as one would after a crash between the commit and its removal;
// recovery drops it (its record is committed), and a marker found holding
// another call's record (a crash between the write and the rename) is
// taken as that call's (scanMarkers).
//
// A marker this store holds no file for (none written, or written the
// ordinary way) is removed at once, as removeMarker does.
func (sp *spares) retire(path string) error {
	f := sp.release(path)
	dir := filepath.Dir(path)
	if f.size < 0 {
		return sp.removeFile(dir, path, f)
	}
	dfd := sp.openDir(dir)
	if dfd == unix.AT_FDCWD {
		if f.fd >= 0 {
			unix.Close(f.fd)
			f.fd = -1
		}
		f.dir = unix.AT_FDCWD
	} else {
		f.dir = dfd
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if f.fd >= 0 {
		sp.open++ // counted with the ready spares until taken
	}
	sd := sp.dir(dir)
	sd.retired = append(sd.retired, f)
	return nil
}

// takeRetired returns a retired marker of dir to write the next marker
// into, or false when there is none.
func (sp *spares) takeRetired(dir string) (spare, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sd := sp.dir(dir)
	f, ok := popLast(&sd.aging)
	if !ok {
		f, ok = popLast(&sd.retired)
	}
	if ok && f.fd >= 0 {
		sp.open--
	}
	return f, ok
}

// ageRetired removes the retired markers (of every directory) that no
// marker has taken since the previous call, and makes the others aging.
// The committer calls it once a batch; it reports whether retired
// markers remain, for a later call.
func (sp *spares) ageRetired() bool {
	type expired struct {
		dir string
		fs  []spare
	}
	var out []expired
	left := false
	sp.mu.Lock()
	for dir, sd := range sp.dirs {
		if len(sd.aging) > 0 {
			for _, f := range sd.aging {
				if f.fd >= 0 {
					sp.open--
				}
			}
			out = append(out, expired{dir, sd.aging})
		}
		sd.aging, sd.retired = sd.retired, nil
		left = left || len(sd.aging) > 0
	}
	sp.mu.Unlock()
	for _, e := range out {
		sp.parkRetired(e.dir, e.fs)
	}
	return left
}

// parkRetired removes the retired markers fs of dir, taken off its lists
// (not counted open), as removeMarker does.
func (sp *spares) parkRetired(dir string, fs []spare) {
	for _, f := range fs {
		sp.removeFile(dir, f.path, f)
	}
}

// removeMarker removes the in-flight marker at path: it is renamed to a
// spare name of its directory (no call data is lost: its record is
// committed) and parked with its file still open, or removed when no
// name is free. A marker already gone is no error.
func (sp *spares) removeMarker(path string) error {
	return sp.removeFile(filepath.Dir(path), path, sp.release(path))
}

// removeFile is removeMarker of the marker at path in dir, with its
// file f released.
func (sp *spares) removeFile(dir, path string, f spare) error {
	if p := sp.name(dir); p != "" {
		dfd, old, new := sp.openDir(dir), path, p
		if dfd != unix.AT_FDCWD {
			old, new = filepath.Base(path), filepath.Base(p)
		}
		if err := sysRenameAt(dfd, old, dfd, new, path, p); err == nil {
			f.path, f.dir = p, dfd
			sp.park(dir, f)
			return nil
		}
		sp.settle(dir, p)
	}
	if f.fd >= 0 {
		unix.Close(f.fd)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// drop removes the ready spares of dir from disk, so that recovery, which
// promotes markers through the commit path, leaves only markers behind.
// A commit parking a marker meanwhile is no harm: a spare holds no data
// anyone needs, and one found missing is written the ordinary way.
func (sp *spares) drop(dir string) {
	sp.mu.Lock()
	sd := sp.dir(dir)
	ready, fresh := sd.ready, sd.fresh
	sd.ready, sd.fresh = nil, nil
	// Retired markers on disk are recovery's (committed: dropped).
	for _, f := range slices.Concat(sd.retired, sd.aging) {
		if f.fd >= 0 {
			sp.open--
			unix.Close(f.fd)
		}
	}
	sd.retired, sd.aging = nil, nil
	for _, f := range ready {
		sd.idle = append(sd.idle, f.path)
		if f.fd >= 0 {
			sp.open--
		}
	}
	sp.mu.Unlock()
	for _, f := range slices.Concat(ready, fresh) {
		if f.fd >= 0 {
			unix.Close(f.fd)
		}
	}
	for _, f := range ready {
		os.Remove(f.path)
	}
	// And where refill makes them (this store's and those of earlier
	// runs): empty unless a crash left one.
	removeStocks(dir)
}

// stockDir prefixes the directories, under an in-flight directory, where
// new spares are created, and from where they are renamed straight to
// their record file or marker: creating a file holds its directory's
// lock while the file system looks for a free inode, which took long
// enough (hundreds of microseconds, recently freed inodes skipped one by
// one) to hold up the markers' renames in the in-flight directory.
// Recovery skips directories there and removes these.
//
// Each store names its own with a random suffix, and the in-flight
// directory is marked a top directory (topdir.go), so that ext4 places
// it by the hash of that name in a block group with few directories: the
// new files' inodes come from its group. Under one fixed name every run
// (and every process on the machine with a data directory on that file
// system) created its record files in the same block group, whose inodes
// the removal of earlier runs' data had freed: a creation there, skipping
// each inode freed in the last minute, cost 120-200 us of kernel time
// against 7 us in a quiet group (BenchmarkSpareCreate).
const stockDir = ".stock"

// stockPath returns a new stock directory name under the in-flight
// directory dir.
func stockPath(dir string) string {
	return filepath.Join(dir, stockDir+"-"+strconv.FormatUint(rand.Uint64(), 36))
}

// removeStocks removes the stock directories under the in-flight
// directory dir.
func removeStocks(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), stockDir) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// popLast removes and returns the last element of *s, or false when *s is
// empty.
func popLast[T any](s *[]T) (T, bool) {
	n := len(*s)
	if n == 0 {
		var zero T
		return zero, false
	}
	v := (*s)[n-1]
	*s = (*s)[:n-1]
	return v, true
}
