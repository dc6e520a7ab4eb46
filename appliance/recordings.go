package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/dialplan"
	"pbx/appliance/recording"
	"pbx/appliance/routing"
	"pbx/appliance/upload"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// newRecordings opens the recordings under dataDir, with the upload queue
// when recording.storage is s3, and promotes what a crash left in flight;
// it runs before any listener opens.
func newRecordings(dataDir string, cfg *config.Config, calls *cdr.Store, log *slog.Logger) (*recording.Store, *upload.Queue, error) {
	sys := &cfg.System
	opts := recording.Options{DataDir: dataDir, Location: cfg.LocationFunc()}
	if calls != nil {
		opts.Describe = func(id string) (recording.Sidecar, bool) { return describeCall(calls, cfg, id) }
	}
	var q *upload.Queue
	if sys.Recording.Storage == "s3" && sys.Storage != nil && sys.Storage.S3 != nil {
		o := sys.Storage.S3
		client, err := upload.NewS3(context.Background(), upload.S3Options{
			Bucket: o.Bucket, Region: o.Region, Endpoint: o.Endpoint, PathStyle: o.PathStyle,
			AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey.Reveal(), SessionToken: o.SessionToken.Reveal(),
			SSE: o.SSE, KMSKeyID: o.KMSKeyID, StorageClass: o.StorageClass, Timeout: o.Timeout.D(),
			// Keys with {callid} are the recording's own: a PUT repeated
			// after a crash must not store it twice.
			IfAbsent: strings.Contains(keyPrefixOf(o), "{callid}"),
		})
		if err != nil {
			return nil, nil, err
		}
		prefix := keyPrefixOf(o)
		q, err = upload.New(uploadTestKnobs(upload.Options{DataDir: dataDir, Store: client, KeyPrefix: prefix,
			KeepLocal: sys.Recording.KeepLocal, Location: cfg.LocationFunc()}), log.With("component", "upload"))
		if err != nil {
			return nil, nil, err
		}
		opts.Enqueue = func(sc *recording.Sidecar, audio, sidecar string) error {
			return q.Enqueue(upload.Recording{ID: sc.ID, Tenant: sc.Tenant, Ext: extOf(sc), Start: sc.Start, Audio: audio, Sidecar: sidecar})
		}
		loc := cfg.LocationFunc()
		opts.Fetch = func(ctx context.Context, sc *recording.Sidecar) (io.ReadCloser, error) {
			// The key as the upload made it (a keyPrefix changed since
			// then finds nothing).
			keys := upload.KeysFor(prefix, upload.KeyVars{Tenant: sc.Tenant, CallID: sc.ID, Ext: extOf(sc), Start: sc.Start.In(loc(sc.Tenant))})
			rc, _, err := client.Get(ctx, keys.Audio)
			if errors.Is(err, upload.ErrNoObject) {
				return nil, fmt.Errorf("%w: %w", cdr.ErrNotFound, err)
			}
			return rc, err
		}
	}
	s, err := recording.New(opts, log)
	if err != nil {
		return nil, nil, err
	}
	actions, err := s.Recover()
	for _, act := range actions {
		log.Warn("recording recovery", "action", act)
	}
	if err != nil {
		// A file that cannot be promoted stays where it is, for an
		// operator; it does not keep the PBX from taking calls.
		log.Error("recording recovery", "err", err)
	}
	return s, q, nil
}

// describeCall is what the call record of id says, for a recording found
// without a sidecar; it looks under every configured tenant.
func describeCall(calls *cdr.Store, cfg *config.Config, id string) (recording.Sidecar, bool) {
	for _, t := range cfg.Tenants {
		r, err := calls.Get(context.Background(), t.Name, cdr.ID(id))
		if err != nil {
			continue
		}
		return recording.Sidecar{Tenant: r.Tenant, CallID: r.CallID, Direction: r.Direction, From: r.From, To: r.To,
			DID: r.DID, Trunk: r.Trunk, AnsweredBy: r.AnsweredBy, Start: r.Start, End: r.End}, true
	}
	return recording.Sidecar{}, false
}

// keyPrefixOf is storage.s3.keyPrefix, its default when empty.
func keyPrefixOf(o *config.S3) string {
	if o.KeyPrefix == "" {
		return config.DefaultKeyPrefix
	}
	return o.KeyPrefix
}

// extOf is the {ext} of a recording's object key: the extension calling
// on an outbound call, else the one that answered.
func extOf(sc *recording.Sidecar) string {
	if sc.Direction == calls.DirectionOutbound {
		return sc.From
	}
	return sc.AnsweredBy
}

// envUploadBackoff is a test knob: the upload queue's first backoff (it
// doubles to ten times that), in Go syntax; the configuration does not
// expose it.
const envUploadBackoff = "PBX_TEST_UPLOAD_BACKOFF"

func uploadTestKnobs(o upload.Options) upload.Options {
	if d, err := time.ParseDuration(os.Getenv(envUploadBackoff)); err == nil && d > 0 {
		o.BackoffMin, o.BackoffMax = d, 10*d
	}
	return o
}

// callRecorder applies the recording policy when a call is bridged: the
// decision becomes the call record's `record` step, and an armed call is
// recorded from its two RTP legs until it ends. It runs before the call
// log among the observers, so the step is in the in-flight marker too.
type callRecorder struct {
	policy *recording.Policy
	store  *recording.Store
	steps  *dialplan.Steps
	log    *slog.Logger
	// finished is told of every recording made whole (the event bus).
	finished func(*recording.Sidecar)

	mu     sync.Mutex
	active map[b2bua.CallID]*recording.Recorder
}

func newCallRecorder(p *recording.Policy, s *recording.Store, steps *dialplan.Steps, finished func(*recording.Sidecar), log *slog.Logger) *callRecorder {
	return &callRecorder{policy: p, store: s, steps: steps, finished: finished, log: log, active: map[b2bua.CallID]*recording.Recorder{}}
}

func (r *callRecorder) CallEvent(ev b2bua.Event) {
	c := &ev.Call
	switch ev.Kind {
	case b2bua.EventAnswered:
		if c.Tenant == "" {
			return // no tenant, no call record, nowhere to file a recording
		}
		d := r.policy.Decide(c)
		step := cdr.Step{Type: routing.StepRecord, At: ev.At, Result: d.Result(), Error: d.Refused}
		if d.Record {
			legs := recording.Legs{Caller: ev.Media.Caller, Callee: ev.Media.Callee, PayloadType: ev.Media.PayloadType}
			rec, err := r.store.Start(sidecarOf(c), legs, ev.At)
			if err != nil {
				r.log.Error("recording not started", "call", c.ID, "tenant", c.Tenant, "err", err)
				step.Error = "the recording could not be started"
			} else {
				r.mu.Lock()
				r.active[c.ID] = rec
				r.mu.Unlock()
			}
		}
		r.steps.InsertBeforeLast(c.ID, step)
	case b2bua.EventEnded:
		r.mu.Lock()
		rec, ok := r.active[c.ID]
		delete(r.active, c.ID)
		r.mu.Unlock()
		if !ok {
			return
		}
		end := c.End
		if end.IsZero() {
			end = ev.At
		}
		id, tenant := c.ID, c.Tenant
		sc := sidecarOf(c)
		if sc.End.IsZero() {
			sc.End = end.UTC().Truncate(time.Millisecond)
		}
		rec.Stop(sc, end, func(sc *recording.Sidecar, err error) {
			if err != nil {
				r.log.Error("recording not finished", "call", id, "tenant", tenant, "err", err)
				return
			}
			r.log.Info("recording finished", "call", id, "tenant", tenant, "duration_ms", sc.DurationMS, "bytes", sc.Bytes, "dropped", rec.Dropped())
			if r.finished != nil {
				r.finished(sc)
			}
		})
	}
}

// sidecarOf is what a call's sidecar says of it, as its call record does.
func sidecarOf(c *b2bua.CallInfo) recording.Sidecar {
	from, _ := c.Calling()
	rec := recordOf(c)
	sc := recording.Sidecar{ID: string(c.ID), Tenant: c.Tenant, CallID: c.SIPCallID, Direction: rec.Direction,
		From: from, To: c.To, DID: c.DID, Trunk: c.Trunk, AnsweredBy: c.AnsweredBy, Start: c.Start.UTC().Truncate(time.Millisecond)}
	if !c.End.IsZero() {
		sc.End = c.End.UTC().Truncate(time.Millisecond)
	}
	return sc
}
