package cdr

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"pbx/appliance/datadir"
)

// dirSyncs groups the directory fsyncs that make committed records'
// renames durable: each commit needs one after its rename, and one fsync
// started after several renames covers them all. A commit waits for a sync
// that started after its rename, running it itself when none is running,
// so under concurrent commits one fsync of a day directory serves a batch.
type dirSyncs struct {
	mu   sync.Mutex
	dirs map[string]*dirSync // one per day directory written since start
	runs atomic.Int64        // fsyncs run, for tests and benchmarks
	// held are the directories open (dirSync.fd), at most maxDirFDs;
	// clock numbers their uses.
	held  []*dirSync
	clock atomic.Int64
}

// maxDirFDs bounds the day directories held open for renames: a tenant's
// commits go to today's (yesterday's for calls across midnight); past
// the bound the least recently used one is closed. They are among the
// records' own descriptors, which the open file budget leaves beside the
// held markers (appliance/fdbudget.go): one or two a tenant taking calls.
const maxDirFDs = 64

type dirSync struct {
	// ns serialises the creations and renames of commits in the directory:
	// concurrent ones contend on the directory's lock in the kernel, which
	// spins for it on another CPU; waiting here costs none.
	ns sync.Mutex
	// fd is the directory open (-1: not), which record files are renamed
	// into by name, under ns: no walk of the data directory's path a
	// commit (about 3 us of the kernel's rename in the pbx at 500 calls/s,
	// perf: __filename_parentat). used is when it last served (ds.clock).
	fd      int
	used    atomic.Int64
	mu      sync.Mutex
	cond    sync.Cond
	want    uint64 // renames asking for a sync, numbered
	done    uint64 // renames up to this number are durable
	running bool
}

func (ds *dirSyncs) of(dir string) *dirSync {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.dirs == nil {
		ds.dirs = map[string]*dirSync{}
	}
	d := ds.dirs[dir]
	if d == nil {
		d = &dirSync{fd: -1}
		d.cond.L = &d.mu
		ds.dirs[dir] = d
	}
	return d
}

// sync returns once an fsync of dir that started after the caller's rename
// in it has succeeded, or with the error of the one the caller ran.
func (ds *dirSyncs) sync(dir string) error {
	d := ds.of(dir)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want++
	mine := d.want
	for d.done < mine {
		if d.running {
			d.cond.Wait()
			continue
		}
		d.running = true
		upTo := d.want // every rename numbered so far is done: this sync covers it
		d.mu.Unlock()
		err := datadir.SyncDir(dir)
		ds.runs.Add(1)
		d.mu.Lock()
		d.running = false
		d.cond.Broadcast()
		if err != nil {
			return err // the others run their own
		}
		d.done = max(d.done, upTo)
	}
	return nil
}

// dirTarget is a day directory that record files are renamed into.
type dirTarget struct {
	ds  *dirSyncs
	d   *dirSync
	dir string
}

// target returns dir's rename target.
func (ds *dirSyncs) target(dir string) *dirTarget {
	return &dirTarget{ds, ds.of(dir), dir}
}

// acquire takes the directory's rename lock and returns it open, opening
// it (AT_FDCWD when it cannot be: the rename then names the whole path).
func (t *dirTarget) acquire() int {
	d := t.d
	d.ns.Lock()
	d.used.Store(t.ds.clock.Add(1))
	if d.fd >= 0 {
		return d.fd
	}
	fd, err := sysOpen(t.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return unix.AT_FDCWD
	}
	d.fd = fd
	t.ds.hold(d)
	return fd
}

// release gives the rename lock back after a rename that returned err:
// one that failed other than for an existing target (the directory may
// have been removed, and made again) closes the directory, which the
// next rename opens again.
func (t *dirTarget) release(err error) {
	d := t.d
	if err != nil && !errors.Is(err, errCommitted) && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
		t.ds.drop(d)
	}
	d.ns.Unlock()
}

// hold notes d, whose ns the caller holds, as open, and closes the least
// recently used other directory past maxDirFDs: one whose rename lock is
// free (TryLock: the caller holds d's, so waiting could deadlock).
func (ds *dirSyncs) hold(d *dirSync) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if len(ds.held) >= maxDirFDs {
		victim := -1
		for i, o := range ds.held {
			if victim < 0 || o.used.Load() < ds.held[victim].used.Load() {
				victim = i
			}
		}
		if o := ds.held[victim]; o.ns.TryLock() {
			unix.Close(o.fd)
			o.fd = -1
			o.ns.Unlock()
			ds.held = slices.Delete(ds.held, victim, victim+1)
		}
	}
	ds.held = append(ds.held, d)
}

// drop forgets d, closed, from the directories held open.
func (ds *dirSyncs) drop(d *dirSync) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if i := slices.Index(ds.held, d); i >= 0 {
		ds.held = slices.Delete(ds.held, i, i+1)
	}
}
