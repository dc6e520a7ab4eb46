package notice

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/spool"
)

// Defaults of the outbox.
const (
	DefaultBackoffMin = 30 * time.Second
	DefaultBackoffMax = 30 * time.Minute
	DefaultGiveUp     = 7 * 24 * time.Hour
	// maxAttachBytes bounds the recording attached to one email; a larger
	// file is notified without it.
	maxAttachBytes = 20 << 20
)

// Settings returns the effective SMTP settings of a tenant (System merged
// with the tenant field by field, config.Config.SMTPFor), nil when it has
// none. It is called at every attempt, so a reload takes effect.
type Settings func(tenant string) *config.SMTP

// Options configure an Outbox.
type Options struct {
	DataDir  string
	Settings Settings
	// BackoffMin, BackoffMax and GiveUp default to 30 s, 30 min and 7 days.
	BackoffMin, BackoffMax, GiveUp time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Outbox is the durable queue of voicemail notices.
type Outbox struct {
	opts Options
	log  *slog.Logger
	sp   *spool.Spool // notices/pending and notices/failed

	mu   sync.Mutex
	jobs map[string]*Job
	wake chan struct{}

	// beforeData, when set (tests), runs after the sending state is
	// written and before the DATA command.
	beforeData func(j *Job)
}

// Open opens the outbox under dataDir with the default retry policy.
func Open(dataDir string, settings Settings, log *slog.Logger) (*Outbox, error) {
	return OpenWith(Options{DataDir: dataDir, Settings: settings}, log)
}

// OpenWith opens the outbox and loads its jobs: a sent job is deleted, a
// job left sending is due again at once (see the package documentation),
// and a file that is not a job is quarantined in notices/failed/.
func OpenWith(opts Options, log *slog.Logger) (*Outbox, error) {
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
	if opts.Settings == nil {
		return nil, errors.New("notice outbox: no SMTP settings function")
	}
	sp, err := spool.Open(filepath.Join(opts.DataDir, "notices"))
	if err != nil {
		return nil, fmt.Errorf("notice outbox: %w", err)
	}
	o := &Outbox{opts: opts, log: log, sp: sp, jobs: map[string]*Job{}, wake: make(chan struct{}, 1)}
	bad, err := sp.Load(func(file string, b []byte) error {
		j, err := decodeJob(b)
		if err != nil {
			return err
		}
		if spool.FileOf(j.ID) != file {
			return fmt.Errorf("job %q in the wrong file", j.ID)
		}
		switch j.State {
		case StateSent:
			o.remove(j)
			return nil
		case StateSending:
			o.log.Warn("voicemail notice was being sent when the PBX stopped: sending it again with the same Message-ID",
				"id", j.ID, "tenant", j.Notice.Tenant, "extension", j.Notice.Extension)
			j.NextAttemptAt = o.opts.Now().UTC()
		}
		o.jobs[j.ID] = j
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("notice outbox: %w", err)
	}
	for _, b := range bad {
		o.quarantined(b)
	}
	return o, nil
}

// quarantined logs a job file that was not a job, moved to failed/ as it
// was.
func (o *Outbox) quarantined(b spool.Bad) {
	if b.Moved != nil {
		o.log.Error("notice job unreadable and not quarantined", "file", b.Name, "err", b.Moved, "cause", b.Err)
		return
	}
	o.log.Error("notice job unreadable: moved to notices/failed", "file", b.Name, "err", b.Err)
}

// Enqueue queues the notice of one message; when it returns nil the job
// is on disk and will be sent, across restarts, until it succeeds or
// gives up. A notice of a message already waiting is not queued twice. A
// tenant without SMTP settings or a bad address is an error.
func (o *Outbox) Enqueue(n Notice) error {
	if _, err := mail.ParseAddress(n.To); err != nil {
		return fmt.Errorf("voicemail notice: mailbox email %q: %w", n.To, err)
	}
	if s := o.opts.Settings(n.Tenant); s == nil || s.Host == "" {
		return fmt.Errorf("voicemail notice: tenant %q has no SMTP relay configured", n.Tenant)
	}
	id, err := jobID(n)
	if err != nil {
		return err
	}
	o.mu.Lock()
	_, dup := o.jobs[id]
	o.mu.Unlock()
	if dup {
		return nil // the same message's notice is already queued
	}
	now := o.opts.Now().UTC()
	j := &Job{ID: id, State: StatePending, Notice: n, CreatedAt: now, NextAttemptAt: now}
	if err := o.write(j); err != nil {
		return err
	}
	o.mu.Lock()
	o.jobs[id] = j
	o.mu.Unlock()
	o.poke()
	return nil
}

// jobID names a notice's job after its message (tenant, extension,
// message id), so that enqueueing the same message again while its
// notice waits adds nothing; without a message id it is random.
func jobID(n Notice) (string, error) {
	if n.MessageID != "" {
		h := sha256.Sum256([]byte(n.Tenant + "\x00" + n.Extension + "\x00" + n.MessageID))
		return hex.EncodeToString(h[:12]), nil
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("voicemail notice id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// write stores j's file (before its first attempt, after each).
func (o *Outbox) write(j *Job) error {
	if err := o.sp.Write(j.ID, j); err != nil {
		return fmt.Errorf("notice job %s: %w", j.ID, err)
	}
	return nil
}

func (o *Outbox) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of notices not yet sent nor given up.
func (o *Outbox) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.jobs)
}

// Run sends due notices, one at a time, until ctx ends. Only the dial
// heeds ctx: a conversation under way finishes (within smtp.timeout), so
// a graceful stop never leaves a notice half sent.
func (o *Outbox) Run(ctx context.Context) error {
	for {
		due, next := o.due()
		for _, j := range due {
			if ctx.Err() != nil {
				return nil
			}
			o.attempt(ctx, j)
		}
		if len(due) > 0 {
			continue
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(max(next.Sub(o.opts.Now()), time.Millisecond))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-o.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// due lists copies of the jobs to try now, oldest first, and when the
// next one falls due.
func (o *Outbox) due() ([]*Job, time.Time) {
	now := o.opts.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	var due []*Job
	var next time.Time
	for _, j := range o.jobs {
		if !j.NextAttemptAt.After(now) {
			cp := *j
			due = append(due, &cp)
		} else if next.IsZero() || j.NextAttemptAt.Before(next) {
			next = j.NextAttemptAt
		}
	}
	slices.SortFunc(due, func(a, b *Job) int { return a.NextAttemptAt.Compare(b.NextAttemptAt) })
	return due, next
}

// ConfigSettings is the Settings of the configuration in force: current
// is called at every attempt, so a reload applies to queued notices.
func ConfigSettings(current func() *config.Config) Settings {
	return func(tenant string) *config.SMTP {
		cfg := current()
		if cfg == nil {
			return nil
		}
		t := cfg.Tenant(tenant)
		if t == nil {
			return nil
		}
		return cfg.SMTPFor(t)
	}
}
