package voicemail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"pbx/appliance/datadir"
	"time"
)

// Temporary names in a mailbox directory. A message being recorded is
// .<id>.wav.tmp with its metadata so far in .<id>.rec.json; a greeting
// being recorded is .greeting.wav.tmp; a JSON being replaced is
// .<name>.json.tmp.
const (
	tmpWAVSuffix = ".wav.tmp"
	recSuffix    = ".rec.json"
	tmpGreeting  = ".greeting.wav.tmp"
)

// writeJSON replaces path with v crash-safely: temporary file, fsync,
// rename, fsync of the directory.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := datadir.WriteFile(path, append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("voicemail: %w", err)
	}
	return nil
}

// Recorder streams audio to a temporary file in a mailbox directory; Commit
// makes it a message (or the greeting), Abort removes it.
type Recorder struct {
	s        *Store
	f        *os.File
	tmp      string
	final    string // the WAV's final path
	msg      *Message
	data     int64 // PCM bytes written
	greeting bool
}

// Begin starts recording message m (its ID, Tenant and Extension set) into
// its mailbox. The metadata is written next to the audio first, so that a
// crash keeps the caller's number with what was said.
func (s *Store) Begin(m Message) (*Recorder, error) {
	wav, _, err := s.paths(m.Tenant, m.Extension, m.ID)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(wav)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("voicemail: %w", err)
	}
	if _, err := os.Stat(wav); err == nil {
		return nil, fmt.Errorf("%w: message %s exists", ErrExists, m.ID)
	}
	if m.ReceivedAt.IsZero() {
		m.ReceivedAt = s.opts.Now().UTC()
	}
	m.Folder, m.HeardAt, m.DurationMS = FolderNew, nil, 0
	if err := writeJSON(filepath.Join(dir, "."+m.ID+recSuffix), m); err != nil {
		return nil, err
	}
	r, err := s.create(filepath.Join(dir, "."+m.ID+tmpWAVSuffix), wav)
	if err != nil {
		_ = os.Remove(filepath.Join(dir, "."+m.ID+recSuffix))
		return nil, err
	}
	r.msg = &m
	return r, nil
}

// BeginGreeting starts recording the mailbox's greeting.
func (s *Store) BeginGreeting(tenant, extension string) (*Recorder, error) {
	dir, err := s.Dir(tenant, extension)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("voicemail: %w", err)
	}
	r, err := s.create(filepath.Join(dir, tmpGreeting), filepath.Join(dir, GreetingFile))
	if err != nil {
		return nil, err
	}
	r.greeting = true
	return r, nil
}

func (s *Store) create(tmp, final string) (*Recorder, error) {
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("voicemail: %w", err)
	}
	if _, err := f.Write(wavHeader(0)); err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("voicemail: %w", err)
	}
	return &Recorder{s: s, f: f, tmp: tmp, final: final}, nil
}

// Write appends samples to the file (unbuffered: what was written survives
// a crash of the process).
func (r *Recorder) Write(pcm []int16) error {
	n, err := r.f.Write(pcmBytes(pcm))
	r.data += int64(n)
	if err != nil {
		return fmt.Errorf("voicemail: write audio: %w", err)
	}
	return nil
}

// Written is the number of samples written so far.
func (r *Recorder) Written() int64 { return r.data / 2 }

// Commit keeps the first keep samples (trailing silence cut off), finalises
// the WAV, renames it into place and, for a message, writes its metadata.
// It returns the stored message (nil for a greeting).
func (r *Recorder) Commit(keep int64) (*Message, error) {
	keep = min(max(keep, 0), r.Written())
	err := finishWAV(r.f, keep*2)
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(r.tmp, r.final)
	}
	dir := filepath.Dir(r.final)
	if err == nil {
		err = datadir.SyncDir(dir)
	}
	if err != nil {
		r.cleanup()
		return nil, fmt.Errorf("voicemail: commit: %w", err)
	}
	if r.greeting {
		return nil, nil
	}
	m := *r.msg
	m.DurationMS = keep * 1000 / sampleRate
	if err := r.s.finish(dir, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// finish writes a promoted message's metadata, drops its recording
// metadata and tells the callbacks.
//
// OnDeposit runs before the metadata is written, so a notice queued there
// survives a crash that follows: until the metadata exists, the next
// start's recovery sees the message as unfinished, promotes it and calls
// OnDeposit again (the notice outbox keeps one job per message).
func (s *Store) finish(dir string, m *Message) error {
	if s.opts.OnDeposit != nil {
		s.opts.OnDeposit(*m, filepath.Join(dir, m.ID+".wav"))
	}
	if err := writeJSON(filepath.Join(dir, m.ID+".json"), m); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "."+m.ID+recSuffix))
	s.changed(m.Tenant, m.Extension)
	return nil
}

// Abort discards the recording: no file is left.
func (r *Recorder) Abort() error {
	r.f.Close()
	return r.cleanup()
}

func (r *Recorder) cleanup() error {
	err := os.Remove(r.tmp)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if r.msg != nil {
		_ = os.Remove(filepath.Join(filepath.Dir(r.final), "."+r.msg.ID+recSuffix))
	}
	return err
}

// HasGreeting reports whether the mailbox has its own greeting.
func (s *Store) HasGreeting(tenant, extension string) bool {
	dir, err := s.Dir(tenant, extension)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, GreetingFile))
	return err == nil
}

// Greeting returns the mailbox's own greeting, nil when it has none.
func (s *Store) Greeting(tenant, extension string) []int16 {
	dir, err := s.Dir(tenant, extension)
	if err != nil {
		return nil
	}
	f, err := os.Open(filepath.Join(dir, GreetingFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	pcm, err := readPCM(f)
	if err != nil {
		s.log.Warn("voicemail: unreadable greeting", "tenant", tenant, "extension", extension, "err", err)
		return nil
	}
	return pcm
}

// EraseGreeting removes the mailbox's own greeting (none is no error).
func (s *Store) EraseGreeting(tenant, extension string) error {
	dir, err := s.Dir(tenant, extension)
	if err != nil {
		return err
	}
	err = os.Remove(filepath.Join(dir, GreetingFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = datadir.SyncDir(dir)
	}
	return err
}

// messageTime is the time an id names (the call's start), or now.
func (s *Store) messageTime(id string) time.Time {
	if t, err := cdrTime(id); err == nil {
		return t
	}
	return s.opts.Now().UTC()
}
