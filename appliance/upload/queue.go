package upload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"pbx/appliance/spool"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of the queue (the specification's limits).
const (
	DefaultWorkers    = 2
	DefaultBackoffMin = 30 * time.Second
	DefaultBackoffMax = 30 * time.Minute
	DefaultGiveUp     = 7 * 24 * time.Hour
)

// Store puts one local file as an object; the S3 client implements it.
type Store interface {
	Put(ctx context.Context, key, path, contentType string) error
}

// errVanished: the local file was gone before it was uploaded.
var errVanished = errors.New("local file vanished before upload")

// Options configure a Queue.
type Options struct {
	DataDir   string
	Store     Store
	KeyPrefix string // storage.s3.keyPrefix
	KeepLocal bool   // recording.keepLocal
	// Location is a tenant's zone, for the key's date tokens; nil is UTC.
	Location func(tenant string) *time.Location
	// Workers is how many uploads run at once; 0 means 2.
	Workers int
	// BackoffMin, BackoffMax and GiveUp default to 30 s, 30 min and 7 days.
	BackoffMin, BackoffMax, GiveUp time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Recording is what Enqueue needs of a finished recording.
type Recording struct {
	ID, Tenant string
	Ext        string    // for {ext}
	Start      time.Time // the call's start, for the date tokens
	Audio      string    // local path of the WAV
	Sidecar    string    // local path of the sidecar
}

// Queue uploads finished recordings.
type Queue struct {
	opts Options
	log  *slog.Logger
	sp   *spool.Spool // uploads/pending and uploads/failed

	mu       sync.Mutex
	jobs     map[string]*Job // pending, by id
	busy     map[string]bool
	failures int // jobs moved to failed/ since start
	wake     chan struct{}
}

// Stats are the queue's figures for /v1/status.
type Stats struct {
	Pending   int           // jobs waiting or running
	OldestAge time.Duration // age of the oldest pending job
	Failed    int           // jobs moved to uploads/failed/ since start
}

// New opens the queue under dataDir and loads the pending jobs; a job file
// that cannot be read is quarantined in uploads/failed/.
func New(opts Options, log *slog.Logger) (*Queue, error) {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.GiveUp <= 0 {
		opts.GiveUp = DefaultGiveUp
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Location == nil {
		opts.Location = func(string) *time.Location { return time.UTC }
	}
	sp, err := spool.Open(filepath.Join(opts.DataDir, "uploads"))
	if err != nil {
		return nil, fmt.Errorf("upload queue: %w", err)
	}
	q := &Queue{opts: opts, log: log, sp: sp, jobs: map[string]*Job{}, busy: map[string]bool{}, wake: make(chan struct{}, 1)}
	bad, err := sp.Load(func(file string, b []byte) error {
		j, err := decodeJob(b)
		if err != nil {
			return err
		}
		if spool.FileOf(j.ID) != file {
			return fmt.Errorf("job %q in the wrong file", j.ID)
		}
		q.jobs[j.ID] = j
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("upload queue: %w", err)
	}
	for _, b := range bad {
		q.quarantined(b)
	}
	return q, nil
}

// quarantined counts and logs a job file that was not a job, moved to
// failed/ as it was.
func (q *Queue) quarantined(b spool.Bad) {
	q.failures++
	if b.Moved != nil {
		q.log.Error("upload job unreadable and not quarantined", "file", b.Name, "err", b.Moved, "cause", b.Err)
		return
	}
	q.log.Error("upload job unreadable: moved to uploads/failed", "file", b.Name, "err", b.Err)
}

// Enqueue writes the job of a finished recording before its first
// attempt. A recording already queued is left as it is.
func (q *Queue) Enqueue(r Recording) error {
	q.mu.Lock()
	_, dup := q.jobs[r.ID]
	q.mu.Unlock()
	if dup || r.ID == "" || strings.ContainsAny(r.ID, "/\\") || strings.HasPrefix(r.ID, ".") {
		if dup {
			return nil
		}
		return fmt.Errorf("upload: bad recording id %q", r.ID)
	}
	now := q.opts.Now().UTC()
	vars := KeyVars{Tenant: r.Tenant, CallID: r.ID, Ext: r.Ext, Start: r.Start.In(q.opts.Location(r.Tenant))}
	j := &Job{ID: r.ID, Tenant: r.Tenant, Audio: r.Audio, Sidecar: r.Sidecar, Keys: KeysFor(q.opts.KeyPrefix, vars), CreatedAt: now, NextAttemptAt: now}
	if err := q.write(j); err != nil {
		return err
	}
	q.mu.Lock()
	if _, dup := q.jobs[j.ID]; !dup {
		q.jobs[j.ID] = j
	}
	q.mu.Unlock()
	q.poke()
	return nil
}

// write stores j's file (before its first attempt, after each).
func (q *Queue) write(j *Job) error {
	if err := q.sp.Write(j.ID, j); err != nil {
		return fmt.Errorf("upload job %s: %w", j.ID, err)
	}
	return nil
}

func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of queued uploads (for recording.maxPending).
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.jobs)
}

// Stats reports the queue's depth, its oldest job's age and the failures.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := Stats{Pending: len(q.jobs), Failed: q.failures}
	now := q.opts.Now()
	for _, j := range q.jobs {
		s.OldestAge = max(s.OldestAge, now.Sub(j.CreatedAt))
	}
	return s
}

// Run uploads due jobs, at most Workers at once, until ctx ends; the
// uploads running then are abandoned and retried at the next start.
func (q *Queue) Run(ctx context.Context) error {
	sem := make(chan struct{}, q.opts.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		due, next := q.due()
		for _, j := range due {
			acquired := false
			select {
			case sem <- struct{}{}:
				acquired = true
			default: // every worker is busy: the first to end pokes
			}
			if !acquired {
				break
			}
			q.mu.Lock()
			q.busy[j.ID] = true
			cp := *j
			q.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				q.attempt(ctx, &cp)
				q.mu.Lock()
				delete(q.busy, cp.ID)
				q.mu.Unlock()
				<-sem
				q.poke()
			}()
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(max(next.Sub(q.opts.Now()), time.Millisecond))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-q.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// due lists the jobs to try now, oldest attempt first, and when the next
// one falls due.
func (q *Queue) due() ([]*Job, time.Time) {
	now := q.opts.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	var due []*Job
	var next time.Time
	for id, j := range q.jobs {
		if q.busy[id] {
			continue
		}
		if !j.NextAttemptAt.After(now) {
			due = append(due, j)
		} else if next.IsZero() || j.NextAttemptAt.Before(next) {
			next = j.NextAttemptAt
		}
	}
	slices.SortFunc(due, func(a, b *Job) int { return a.NextAttemptAt.Compare(b.NextAttemptAt) })
	return due, next
}

// attempt uploads what of j is not yet confirmed, then finishes, backs
// off or gives up.
func (q *Queue) attempt(ctx context.Context, j *Job) {
	err := q.upload(ctx, j)
	if err == nil {
		if !q.opts.KeepLocal {
			if rerr := os.Remove(j.Audio); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				q.log.Warn("uploaded recording: local copy not removed", "id", j.ID, "err", rerr)
			}
		}
		if rerr := q.sp.Remove(j.ID); rerr != nil {
			q.log.Warn("uploaded recording: job file not removed", "id", j.ID, "err", rerr)
		}
		q.mu.Lock()
		delete(q.jobs, j.ID)
		q.mu.Unlock()
		q.log.Info("recording uploaded", "id", j.ID, "tenant", j.Tenant, "key", j.Keys.Audio, "attempts", j.Attempts+1)
		return
	}
	if ctx.Err() != nil {
		return // shutting down: not an attempt that failed
	}
	now := q.opts.Now()
	j.Attempts++
	j.LastError = err.Error()
	if errors.Is(err, errVanished) || now.Sub(j.CreatedAt) >= q.opts.GiveUp {
		q.fail(j)
		return
	}
	j.NextAttemptAt = now.Add(q.backoff(j.Attempts)).UTC()
	if werr := q.write(j); werr != nil {
		q.log.Error("upload job not rewritten", "id", j.ID, "err", werr)
	}
	q.mu.Lock()
	q.jobs[j.ID] = j
	q.mu.Unlock()
	q.log.Warn("recording upload failed", "id", j.ID, "tenant", j.Tenant, "attempts", j.Attempts, "next_attempt_at", j.NextAttemptAt, "err", err)
}

// upload puts the audio, then the sidecar, recording each confirmation
// in the job file so that a restart does not repeat it.
func (q *Queue) upload(ctx context.Context, j *Job) error {
	for _, o := range []struct {
		done  *bool
		path  string
		key   string
		ctype string
	}{{&j.Uploaded.Audio, j.Audio, j.Keys.Audio, "audio/wav"}, {&j.Uploaded.Meta, j.Sidecar, j.Keys.Meta, "application/json"}} {
		if *o.done {
			continue
		}
		if _, err := os.Stat(o.path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", errVanished, filepath.Base(o.path))
		}
		if err := q.opts.Store.Put(ctx, o.key, o.path, o.ctype); err != nil {
			return err
		}
		*o.done = true
		if err := q.write(j); err != nil {
			return err
		}
	}
	return nil
}

// fail moves j to failed/, where nothing deletes it.
func (q *Queue) fail(j *Job) {
	q.mu.Lock()
	delete(q.jobs, j.ID)
	q.failures++
	q.mu.Unlock()
	// The job's last state is written in place, then the file is renamed:
	// the job is in exactly one of pending/ and failed/ at every moment,
	// even across a crash.
	if err := q.write(j); err != nil {
		q.log.Error("upload job not moved to failed", "id", j.ID, "err", err)
		return
	}
	if err := q.sp.Fail(j.ID); err != nil {
		q.log.Error("upload job not moved to failed", "id", j.ID, "err", err)
		return
	}
	q.log.Error("recording upload given up: job moved to uploads/failed", "id", j.ID, "tenant", j.Tenant, "attempts", j.Attempts, "err", j.LastError)
}

// backoff is the wait after the n-th failed attempt: BackoffMin doubling
// to BackoffMax, with jitter in its upper half.
func (q *Queue) backoff(n int) time.Duration {
	return spool.Backoff(n, q.opts.BackoffMin, q.opts.BackoffMax)
}
