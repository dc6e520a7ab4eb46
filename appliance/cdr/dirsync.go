package cdr

import (
	"pbx/appliance/datadir"
	"sync"
	"sync/atomic"
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
}

type dirSync struct {
	// ns serialises the creations and renames of commits in the directory:
	// concurrent ones contend on the directory's lock in the kernel, which
	// spins for it on another CPU; waiting here costs none.
	ns      sync.Mutex
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
		d = &dirSync{}
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
