package recording

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pbx/appliance/cdr"
	"pbx/rtpcore"
)

// Directories under the data directory.
const (
	recordingsDir = "recordings"
	inflightDir   = "inflight"
)

// sampleRate is the rate of G.711, the only codecs the PBX carries.
const sampleRate = 8000

// Options configure a Store.
type Options struct {
	DataDir string
	// Location is a tenant's time zone (day directories are the tenant's
	// local date at the call's start); nil means UTC.
	Location func(tenant string) *time.Location
	// CursorKey signs listing cursors; empty means a random key (cursors
	// then do not survive a restart).
	CursorKey []byte
	// QueueSize is how many packets per direction may wait for the writer
	// before the tap drops them; 0 means 500 (10 s of 20 ms packets).
	QueueSize int
	// FlushEvery is how often audio is handed to the kernel (so a killed
	// process loses at most this much); 0 means 250 ms.
	FlushEvery time.Duration
	// Enqueue, when set, is told of every finished recording (its sidecar
	// and the paths of its two files) once the sidecar is on disk, before
	// the in-flight description goes: an upload queue writes its job
	// there. It must be idempotent (recovery may repeat it).
	Enqueue func(sc *Sidecar, audio, sidecar string) error
	// Fetch, when set, reads a recording's audio from the object store
	// when its local copy was removed after upload (keepLocal false).
	Fetch func(ctx context.Context, sc *Sidecar) (io.ReadCloser, error)
}

// Store keeps the recordings under <dataDir>/recordings.
type Store struct {
	opts     Options
	root     string // <dataDir>/recordings
	inflight string
	log      *slog.Logger
	wg       sync.WaitGroup // recorders still writing
}

// New returns the store, creating its directories.
func New(opts Options, log *slog.Logger) (*Store, error) {
	if opts.DataDir == "" {
		return nil, errors.New("recording: no data directory")
	}
	if opts.Location == nil {
		opts.Location = func(string) *time.Location { return time.UTC }
	}
	if len(opts.CursorKey) == 0 {
		opts.CursorKey = make([]byte, 32)
		_, _ = rand.Read(opts.CursorKey)
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 500
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 250 * time.Millisecond
	}
	s := &Store{opts: opts, root: filepath.Join(opts.DataDir, recordingsDir), log: log}
	s.inflight = filepath.Join(s.root, inflightDir)
	if err := os.MkdirAll(s.inflight, 0o750); err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	return s, nil
}

// Wait blocks until every recording stopped so far is finished on disk.
func (s *Store) Wait() { s.wg.Wait() }

// dayDir is the directory of a recording of tenant's call started at t.
func (s *Store) dayDir(tenant string, t time.Time) string {
	l := t.In(s.opts.Location(tenant))
	return filepath.Join(s.root, fmt.Sprintf("%04d", l.Year()), fmt.Sprintf("%02d", int(l.Month())), fmt.Sprintf("%02d", l.Day()))
}

// Legs are the two RTP legs a recording taps: what the caller sends goes
// left, what the far end sends goes right.
type Legs struct {
	Caller, Callee *rtpcore.Leg
	PayloadType    uint8 // the first negotiated codec
}

// Recorder writes one call's recording.
type Recorder struct {
	s     *Store
	sc    Sidecar
	wav   string
	meta  string
	f     *os.File
	w     *rtpcore.WAVWriter
	mix   *mixer
	q     [2]*rtpcore.QueueTap
	untap [2]func()
	stop  chan time.Time
	done  chan struct{}
	err   error
}

// Start begins recording the call described by sc (id, tenant, who; Start
// is the call's start) from legs, bridged at instant at. The audio goes to
// recordings/inflight/<id>.wav, beside <id>.json saying what the sidecar
// will say, until Stop.
func (s *Store) Start(sc Sidecar, legs Legs, at time.Time) (*Recorder, error) {
	if err := cdr.ID(sc.ID).Validate(); err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	if err := cdr.ValidateTenant(sc.Tenant); err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	if legs.Caller == nil || legs.Callee == nil {
		return nil, errors.New("recording: a leg is missing")
	}
	sc.Format = formatFor(legs.PayloadType, sampleRate)
	r := &Recorder{s: s, sc: sc, stop: make(chan time.Time, 1), done: make(chan struct{}),
		wav: filepath.Join(s.inflight, sc.ID+audioExt), meta: filepath.Join(s.inflight, sc.ID+sidecarExt)}
	// What the sidecar will say goes first, so a crash always finds it.
	if err := writeSidecar(r.meta, &r.sc); err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	f, err := os.OpenFile(r.wav, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		os.Remove(r.meta)
		return nil, fmt.Errorf("recording: %w", err)
	}
	if r.w, err = rtpcore.NewWAVWriter(f, sampleRate, 2); err != nil {
		f.Close()
		os.Remove(r.wav)
		os.Remove(r.meta)
		return nil, fmt.Errorf("recording: %w", err)
	}
	r.f = f
	r.mix = newMixer(r.w, sampleRate, at)
	for i, leg := range []*rtpcore.Leg{legs.Caller, legs.Callee} {
		q := rtpcore.NewQueueTap(s.opts.QueueSize)
		r.q[i] = q
		// Only what the party sends: never what the PBX plays to it.
		r.untap[i] = leg.AddTap(rtpcore.TapFunc(func(p *rtpcore.Packet) {
			if p.Dir == rtpcore.In && !p.Injected {
				q.TapRTP(p)
			}
		}))
	}
	s.wg.Add(1)
	go r.run()
	return r, nil
}

// run writes packets as they come until Stop, then finishes the files.
func (r *Recorder) run() {
	defer r.s.wg.Done()
	defer close(r.done)
	tick := time.NewTicker(r.s.opts.FlushEvery)
	defer tick.Stop()
	for {
		select {
		case p := <-r.q[Left].C():
			r.take(Left, &p)
		case p := <-r.q[Right].C():
			r.take(Right, &p)
		case <-tick.C:
			if r.err == nil {
				r.err = r.w.Flush()
			}
		case end := <-r.stop:
			r.drain()
			r.err = errors.Join(r.err, r.finish(end))
			return
		}
	}
}

func (r *Recorder) take(side int, p *rtpcore.TapPacket) {
	if r.err != nil {
		return
	}
	r.err = r.mix.packet(side, p.Header, p.Payload(), p.At)
}

// drain takes the packets still queued (the taps are already removed).
func (r *Recorder) drain() {
	for {
		select {
		case p := <-r.q[Left].C():
			r.take(Left, &p)
		case p := <-r.q[Right].C():
			r.take(Right, &p)
		default:
			return
		}
	}
}

// Stop ends the recording at instant end, with sc's final word on the
// call (end, answered_by, ...; id, tenant and start are kept). The files
// are finished in the background; Store.Wait waits for them, and done is
// called (if not nil) with the sidecar written or the error.
func (r *Recorder) Stop(final Sidecar, end time.Time, done func(*Sidecar, error)) {
	for i := range r.untap {
		r.untap[i]()
	}
	r.sc.CallID, r.sc.Direction, r.sc.From, r.sc.To = final.CallID, final.Direction, final.From, final.To
	r.sc.DID, r.sc.Trunk, r.sc.AnsweredBy, r.sc.End = final.DID, final.Trunk, final.AnsweredBy, final.End
	r.stop <- end
	go func() {
		<-r.done
		if done != nil {
			if r.err != nil {
				done(nil, r.err)
				return
			}
			sc := r.sc
			done(&sc, nil)
		}
	}()
}

// Dropped is the number of packets the taps dropped because the writer
// lagged.
func (r *Recorder) Dropped() uint64 { return r.q[Left].Dropped() + r.q[Right].Dropped() }

// finish finalises the header, fsyncs, moves the WAV to its day directory
// and writes the sidecar there; then the in-flight description goes.
func (r *Recorder) finish(end time.Time) error {
	err := r.mix.finish(end)
	if err == nil {
		err = r.w.Flush()
	}
	if err == nil {
		err = r.f.Sync()
	}
	_ = r.w.Close()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("recording %s: %w", r.sc.ID, err)
	}
	return r.s.promote(&r.sc, r.wav, r.meta)
}

// enqueue hands a finished recording to the upload queue, if any.
func (s *Store) enqueue(sc *Sidecar, audio, sidecar string) error {
	if s.opts.Enqueue == nil {
		return nil
	}
	if err := s.opts.Enqueue(sc, audio, sidecar); err != nil {
		return fmt.Errorf("recording %s: queue upload: %w", sc.ID, err)
	}
	return nil
}

// promote moves the finished WAV at wav to its day directory, writes its
// sidecar there, and removes the in-flight description meta.
func (s *Store) promote(sc *Sidecar, wav, meta string) error {
	dir := s.dayDir(sc.Tenant, sc.Start)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("recording %s: %w", sc.ID, err)
	}
	if err := digest(wav, sc); err != nil {
		return fmt.Errorf("recording %s: %w", sc.ID, err)
	}
	dst := filepath.Join(dir, sc.ID+audioExt)
	if err := os.Rename(wav, dst); err != nil {
		return fmt.Errorf("recording %s: %w", sc.ID, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("recording %s: %w", sc.ID, err)
	}
	side := filepath.Join(dir, sc.ID+sidecarExt)
	if err := writeSidecar(side, sc); err != nil {
		return fmt.Errorf("recording %s: %w", sc.ID, err)
	}
	if err := s.enqueue(sc, dst, side); err != nil {
		return err
	}
	if err := os.Remove(meta); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("recording %s: %w", sc.ID, err)
	}
	return nil
}
