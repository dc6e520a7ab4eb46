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
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/datadir"
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
	// QueueSize is how many packets per direction a tap may add to the
	// taps' log between two of the writer's takes before it drops them (a
	// writer stalled that long); 0 means 250 (5 s of 20 ms packets).
	QueueSize int
	// DrainEvery is how often each recording is handed its packets (in a
	// batch, so the relay does not wake the writer for every packet); the
	// writer takes the taps' log every DrainEvery/drainSlices. 0 means
	// 200 ms.
	DrainEvery time.Duration
	// FlushEvery is how often audio is handed to the kernel (so a killed
	// process loses little more than this); 0 means 400 ms. A drain hands
	// audio over when the last one that did is at least FlushEvery less
	// half a DrainEvery ago, so a tick that comes a little early does not
	// put the write off by a whole DrainEvery.
	FlushEvery time.Duration
	// Enqueue, when set, is told of every finished recording (its sidecar
	// and the paths of its two files) once the sidecar is on disk, before
	// the in-flight description goes: an upload queue writes its job
	// there. It must be idempotent (recovery may repeat it).
	Enqueue func(sc *Sidecar, audio, sidecar string) error
	// Describe, when set, tells recovery what it knows of the call with
	// id (from its call record), for a WAV found without a sidecar or an
	// in-flight description.
	Describe func(id string) (Sidecar, bool)
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
	wg       sync.WaitGroup // the writer loop and recordings being finished

	taps tapLog // what every running recording's parties sent, not yet handed over

	// drainMu serialises handing the taps' packets to the recordings and
	// writing their audio (the writer loop, a Stop's last hand-over); it
	// guards every running recording's mixer, file, err and stopped.
	drainMu sync.Mutex
	spare   [drainSlices]batch  // the log's next buffers; guarded by drainMu
	bins    [drainSlices][]byte // the log's packets by the slice serving their recording, until served; guarded by drainMu

	mu        sync.Mutex
	slices    [drainSlices][]*Recorder // the running recordings, by the slice that serves them
	active    int                      // how many
	nextSlice int
	looping   bool                        // the writer loop runs
	table     atomic.Pointer[[]*Recorder] // by slot, for the log's packets; replaced (never changed) under mu
	free      []uint32                    // slots free in table
	serial    uint32                      // the last recording's serial number
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
		opts.QueueSize = 250
	}
	if opts.DrainEvery <= 0 {
		opts.DrainEvery = 200 * time.Millisecond
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 400 * time.Millisecond
	}
	s := &Store{opts: opts, root: filepath.Join(opts.DataDir, recordingsDir), log: log}
	s.inflight = filepath.Join(s.root, inflightDir)
	if err := os.MkdirAll(s.inflight, 0o750); err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	return s, nil
}

// Wait blocks until every recording stopped so far is finished on disk
// (and, with none running, the writer loop has ended).
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
	s      *Store
	wav    string
	meta   string
	taps   [2]*tapBuffer
	untap  [2]func()
	slice  int    // which of the writer loop's slices serves it
	idx    int    // its index in that slice, -1 once stopped; guarded by s.mu
	slot   uint32 // its place in s.table
	serial uint32 // told apart from an earlier recording in the same slot

	// Guarded by s.drainMu while it runs; Stop's finishing owns them after.
	sc        Sidecar
	f         *os.File
	w         *rtpcore.WAVWriter
	mix       *mixer
	lastFlush time.Time
	stopped   bool
	err       error
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
	r := &Recorder{s: s, sc: sc, lastFlush: at,
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
	s.mu.Lock()
	s.publish(r)
	r.slice = s.nextSlice
	s.nextSlice = (s.nextSlice + 1) % drainSlices
	r.idx = len(s.slices[r.slice])
	s.slices[r.slice] = append(s.slices[r.slice], r)
	s.active++
	if !s.looping {
		s.looping = true
		s.wg.Add(1)
		go s.loop()
	}
	s.mu.Unlock()
	// The taps go on once the loop can find the recording their packets
	// name.
	for i, leg := range []*rtpcore.Leg{legs.Caller, legs.Callee} {
		r.taps[i] = &tapBuffer{log: &s.taps, slot: r.slot<<1 | uint32(i), serial: r.serial, slice: uint8(r.slice), max: s.opts.QueueSize}
		r.untap[i] = leg.AddInTap(r.taps[i])
	}
	return r, nil
}

// publish gives r a slot and serial number and puts it in the table the
// log's packets are looked up in; s.mu is held.
func (s *Store) publish(r *Recorder) {
	var t []*Recorder
	if cur := s.table.Load(); cur != nil {
		t = append(t, *cur...)
	}
	if n := len(s.free); n > 0 {
		r.slot = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		r.slot = uint32(len(t))
		t = append(t, nil)
	}
	s.serial++
	r.serial = s.serial
	t[r.slot] = r
	s.table.Store(&t)
}

// withdraw takes r out of the table, freeing its slot; s.mu is held.
func (s *Store) withdraw(r *Recorder) {
	cur := s.table.Load()
	if cur == nil || int(r.slot) >= len(*cur) || (*cur)[r.slot] != r {
		return
	}
	t := slices.Clone(*cur)
	t[r.slot] = nil
	s.free = append(s.free, r.slot)
	s.table.Store(&t)
}

// drainSlices spreads the writer's work: every DrainEvery/drainSlices it
// serves one slice of the running recordings, so each is drained every
// DrainEvery and the relay never competes with one burst for them all
// (with 500 calls, a slice is 50 recordings, about half a millisecond's
// work, with a yield every yieldEvery of them). Each wake-up of the writer
// costs the process a thread woken, the scheduler's search for work and
// often a relay thread preempted, whatever the writer then does: 40
// slices (200 wake-ups a second) cost the relay's process measurably more
// CPU than 10 (50 a second) for the same work; 5 cost no less than 10
// (BenchmarkRecordedRelay).
const drainSlices = 10

// yieldEvery is how many recordings the writer serves between yields, so
// that a relay goroutine woken onto the writer's P waits for a few
// recordings' work (some 100 µs), not for the whole slice, and the
// writer's next write starts with no goroutine queued behind it (the
// scheduler then leaves its P alone during the system call).
const yieldEvery = 8

// dispatchYield is how many packets the writer hands to their
// recordings between yields (some 100 µs of work), for the same reason as
// yieldEvery.
const dispatchYield = 512

// loop is the one writer of every running recording. Each tick it takes
// the packets the taps collected (in a batch, so the relay never wakes a
// writer per packet, and often, so the log stays small and in the
// relay's cache) and sorts them by the slice that serves their
// recording; then it serves one slice: hands its packets to their
// recordings and, each FlushEvery, their audio to the kernel, so a killed
// process loses little. A recording's state is so touched in one burst
// every DrainEvery, not at every tick (hundreds of recordings' state is
// more than a cache holds). The header's sizes are patched only at the
// end; recovery repairs them after a crash. It ends when no recording
// runs.
func (s *Store) loop() {
	defer s.wg.Done()
	tick := time.NewTicker(max(s.opts.DrainEvery/drainSlices, time.Millisecond))
	defer tick.Stop()
	var rs []*Recorder
	for n := 0; ; n++ {
		<-tick.C
		s.mu.Lock()
		if s.active == 0 {
			s.looping = false
			s.mu.Unlock()
			return
		}
		rs = append(rs[:0], s.slices[n%drainSlices]...)
		s.mu.Unlock()
		now := time.Now()
		s.drainMu.Lock()
		s.sort()
		s.serve(n % drainSlices)
		for i, r := range rs {
			if i > 0 && i%yieldEvery == 0 {
				runtime.Gosched()
			}
			if !r.stopped && now.Sub(r.lastFlush)+s.opts.DrainEvery/2 >= s.opts.FlushEvery {
				r.write()
				r.lastFlush = now
			}
		}
		s.drainMu.Unlock()
	}
}

// sort takes the packets the taps collected since the last sort and
// appends them to the bins of the slices serving their recordings, a
// slice's run in one copy (the log keeps them by slice already; its
// buffers stay the same two, warm in the relay's cache); s.drainMu is
// held.
func (s *Store) sort() {
	s.taps.swap(&s.spare)
	for sl := range s.spare {
		s.bins[sl] = append(s.bins[sl], s.spare[sl].data...)
	}
}

// serve hands the packets sorted into slice's bin to their recordings'
// mixers, in the order they came; s.drainMu is held. A packet of a
// recording no longer running (tapped as it stopped) is left out.
func (s *Store) serve(slice int) {
	var table []*Recorder
	if t := s.table.Load(); t != nil {
		table = *t
	}
	bin := s.bins[slice]
	for d, k := record(bin), 1; ; k++ {
		n := d.next()
		if n == 0 {
			break
		}
		if k%dispatchYield == 0 {
			runtime.Gosched()
		}
		slot := d.slot()
		if i := int(slot >> 1); i < len(table) {
			if r := table[i]; r != nil && r.serial == d.serial() && !r.stopped && r.err == nil {
				r.err = r.mix.packetNano(int(slot&1), d[recPT], d.ts(), d.ssrc(), d.payload(), d.at())
			}
		}
		d = d[n:]
	}
	s.bins[slice] = bin[:0]
}

// write hands the audio final so far to the file in one write (encoded
// in a scratch shared by every recording, so neither the encoding nor the
// kernel's copy touches memory of the recording's own); s.drainMu is
// held.
func (r *Recorder) write() {
	if r.err == nil {
		r.err = r.mix.emit()
	}
}

// errStopped is the error of a second Stop.
var errStopped = errors.New("already stopped")

// Stop ends the recording at instant end, with final's word on the call
// (call_id, direction, who, end; id, tenant and start are kept). The
// files are finished in the background; Store.Wait waits for them, and
// done is called (if not nil) with the sidecar written or the error.
func (r *Recorder) Stop(final Sidecar, end time.Time, done func(*Sidecar, error)) {
	for i := range r.untap {
		r.untap[i]()
	}
	s := r.s
	s.mu.Lock()
	if r.idx < 0 {
		s.mu.Unlock()
		if done != nil {
			done(nil, fmt.Errorf("recording %s: %w", r.sc.ID, errStopped))
		}
		return
	}
	sl := s.slices[r.slice]
	last := sl[len(sl)-1]
	sl[r.idx], last.idx = last, r.idx
	sl[len(sl)-1] = nil
	s.slices[r.slice] = sl[:len(sl)-1]
	r.idx = -1
	s.active--
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// The packets still in the log go to their recordings, this one's
		// last; then the loop leaves it alone.
		s.drainMu.Lock()
		s.sort()
		s.serve(r.slice)
		r.stopped = true
		s.mu.Lock()
		s.withdraw(r)
		s.mu.Unlock()
		s.drainMu.Unlock()
		r.sc.CallID, r.sc.Direction, r.sc.From, r.sc.To = final.CallID, final.Direction, final.From, final.To
		r.sc.DID, r.sc.Trunk, r.sc.AnsweredBy, r.sc.End = final.DID, final.Trunk, final.AnsweredBy, final.End
		err := errors.Join(r.err, r.finish(end))
		sc := r.sc
		if done == nil {
			return
		}
		if err != nil {
			done(nil, err)
			return
		}
		done(&sc, nil)
	}()
}

// Dropped is the number of packets the taps dropped because the writer
// lagged.
func (r *Recorder) Dropped() uint64 {
	return r.taps[Left].dropped.Load() + r.taps[Right].dropped.Load()
}

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
	if err := datadir.SyncDir(dir); err != nil {
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
