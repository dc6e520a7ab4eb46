package notice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/spool"
)

// attempt sends j once, then finishes it, backs it off or gives it up.
func (o *Outbox) attempt(ctx context.Context, j *Job) {
	err := o.send(ctx, j)
	if err == nil {
		o.log.Info("voicemail notice sent", "id", j.ID, "tenant", j.Notice.Tenant, "extension", j.Notice.Extension,
			"message", j.Notice.MessageID, "attempts", j.Attempts+1)
		return
	}
	if ctx.Err() != nil {
		return // shutting down: not a failed attempt; the next start tries again
	}
	now := o.opts.Now()
	j.Attempts++
	j.LastError = err.Error()
	j.State = StatePending
	if now.Sub(j.CreatedAt) >= o.opts.GiveUp {
		o.fail(j)
		return
	}
	j.NextAttemptAt = now.Add(o.backoff(j.Attempts)).UTC()
	if werr := o.write(j); werr != nil {
		o.log.Error("notice job not rewritten", "id", j.ID, "err", werr)
	}
	o.mu.Lock()
	o.jobs[j.ID] = j
	o.mu.Unlock()
	o.log.Warn("voicemail notice not sent: will retry", "id", j.ID, "tenant", j.Notice.Tenant, "extension", j.Notice.Extension,
		"attempts", j.Attempts, "next_attempt_at", j.NextAttemptAt, "err", err)
}

// send composes the email under the settings in force and delivers it,
// with the sending state on disk before DATA and the sent state on disk
// as soon as the server accepted it.
func (o *Outbox) send(ctx context.Context, j *Job) error {
	s := o.opts.Settings(j.Notice.Tenant)
	if s == nil || s.Host == "" {
		return fmt.Errorf("tenant %q has no SMTP relay configured", j.Notice.Tenant)
	}
	m, err := o.message(j, s)
	if err != nil {
		return err
	}
	accepted, err := deliver(ctx, s, m, func() error {
		j.State = StateSending
		if err := o.write(j); err != nil {
			return err
		}
		if o.beforeData != nil {
			o.beforeData(j)
		}
		return nil
	})
	if !accepted {
		return err
	}
	o.finish(j)
	return nil
}

// finish marks j sent on disk, then deletes it: a crash between the two
// leaves a sent job, which Open deletes without sending it again.
func (o *Outbox) finish(j *Job) {
	j.State = StateSent
	if err := o.write(j); err != nil {
		o.log.Error("sent notice not marked sent", "id", j.ID, "err", err)
	}
	o.remove(j)
	o.mu.Lock()
	delete(o.jobs, j.ID)
	o.mu.Unlock()
}

func (o *Outbox) remove(j *Job) {
	if err := o.sp.Remove(j.ID); err != nil {
		o.log.Warn("sent notice: job file not removed", "id", j.ID, "err", err)
	}
}

// message renders the templates and reads the attachment.
func (o *Outbox) message(j *Job, s *config.SMTP) (*email, error) {
	n := j.Notice
	var wav []byte
	if !n.NoAttach && (s.MaxAttach <= 0 || n.Duration <= time.Duration(s.MaxAttach)) {
		b, err := readAttachment(n.WAV)
		if err != nil {
			o.log.Warn("voicemail notice sent without its recording", "id", j.ID, "wav", n.WAV, "err", err)
		}
		wav = b
	}
	v := Vars{Tenant: n.Tenant, Extension: n.Extension, From: n.From, FromName: n.FromName,
		Duration: Duration(n.Duration), ReceivedAt: n.ReceivedAt, MessageID: n.MessageID, Attached: wav != nil}
	subject, err := render("subject", s.Subject, DefaultSubject, v)
	if err != nil {
		return nil, err
	}
	body, err := render("body", s.Body, DefaultBody, v)
	if err != nil {
		return nil, err
	}
	return compose(j, s.From, subject, body, wav)
}

// readAttachment reads the recording; a missing or oversized one is an
// error and the notice goes out without it.
func readAttachment(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("no recording path")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxAttachBytes {
		return nil, fmt.Errorf("%s is %d bytes, over %d", filepath.Base(path), fi.Size(), maxAttachBytes)
	}
	return os.ReadFile(path)
}

// fail moves j to failed/, where nothing deletes it.
func (o *Outbox) fail(j *Job) {
	o.mu.Lock()
	delete(o.jobs, j.ID)
	o.mu.Unlock()
	if err := o.write(j); err != nil {
		o.log.Error("notice job not moved to failed", "id", j.ID, "err", err)
		return
	}
	if err := o.sp.Fail(j.ID); err != nil {
		o.log.Error("notice job not moved to failed", "id", j.ID, "err", err)
		return
	}
	o.log.Error("voicemail notice given up: job moved to notices/failed", "id", j.ID, "tenant", j.Notice.Tenant,
		"extension", j.Notice.Extension, "attempts", j.Attempts, "err", j.LastError)
}

// backoff is the wait after the n-th failed attempt: BackoffMin doubling
// to BackoffMax, with jitter in its upper half.
func (o *Outbox) backoff(n int) time.Duration {
	return spool.Backoff(n, o.opts.BackoffMin, o.opts.BackoffMax)
}
