package voicemail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/datadir"
)

func cdrTime(id string) (time.Time, error) { return cdr.ID(id).Time() }

// Recover walks every mailbox and repairs what a crash left: a message
// recorded into its temporary file is promoted when it is at least
// MinMessage long (header repaired to the last whole sample, renamed, its
// JSON written), else removed; a message whose WAV was renamed but whose
// JSON was not gets its JSON; a JSON whose WAV is gone (a torn delete) and
// a half-recorded greeting are removed. It returns a line per action.
func (s *Store) Recover() ([]string, error) {
	tenants, err := subdirs(s.opts.DataDir)
	if err != nil {
		return nil, err
	}
	var actions []string
	var errs []error
	for _, tn := range tenants {
		if cdr.ValidateTenant(tn) != nil {
			continue
		}
		exts, err := subdirs(filepath.Join(s.opts.DataDir, tn, "voicemail"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ext := range exts {
			if !validExtension(ext) {
				continue
			}
			a, err := s.recoverMailbox(tn, ext)
			actions = append(actions, a...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return actions, errors.Join(errs...)
}

func (s *Store) recoverMailbox(tenant, ext string) ([]string, error) {
	dir, _ := s.Dir(tenant, ext)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range ents {
		have[e.Name()] = true
	}
	var actions []string
	var errs []error
	note := func(format string, args ...any) { actions = append(actions, fmt.Sprintf(format, args...)) }
	for _, e := range ents {
		name, path := e.Name(), filepath.Join(dir, e.Name())
		switch {
		case name == tmpGreeting || strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") && strings.Contains(name, ".json."):
			// A greeting cut short is worse than the one before it; a
			// metadata file's temporary copy (datadir.WriteFile) was
			// never renamed into place.
			_ = os.Remove(path)
			note("removed %s", path)
		case strings.HasPrefix(name, ".") && strings.HasSuffix(name, tmpWAVSuffix):
			id := strings.TrimSuffix(strings.TrimPrefix(name, "."), tmpWAVSuffix)
			a, err := s.promote(tenant, ext, dir, id)
			note("%s", a)
			if err != nil {
				errs = append(errs, err)
			}
		case strings.HasSuffix(name, ".wav") && name != GreetingFile && !strings.HasPrefix(name, "."):
			id := strings.TrimSuffix(name, ".wav")
			if have[id+".json"] || cdr.ID(id).Validate() != nil {
				continue
			}
			m := s.recoveredMeta(tenant, ext, dir, id)
			if fi, err := os.Stat(path); err == nil {
				m.DurationMS = max(fi.Size()-wavHeaderLen, 0) / 2 * 1000 / sampleRate
			}
			if err := s.finish(dir, &m); err != nil {
				errs = append(errs, err)
				continue
			}
			note("wrote the metadata of %s", path)
		case strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, "."):
			id := strings.TrimSuffix(name, ".json")
			if !have[id+".wav"] && cdr.ID(id).Validate() == nil {
				_ = os.Remove(path)
				note("removed %s (its audio is gone)", path)
			}
		case strings.HasSuffix(name, recSuffix):
			id := strings.TrimSuffix(strings.TrimPrefix(name, "."), recSuffix)
			if !have["."+id+tmpWAVSuffix] && (have[id+".json"] || !have[id+".wav"]) {
				_ = os.Remove(path)
			}
		}
	}
	return actions, errors.Join(errs...)
}

// promote turns a leftover temporary recording into a message, or removes
// it when too short.
func (s *Store) promote(tenant, ext, dir, id string) (string, error) {
	tmp := filepath.Join(dir, "."+id+tmpWAVSuffix)
	final := filepath.Join(dir, id+".wav")
	fi, err := os.Stat(tmp)
	if err != nil {
		return "", err
	}
	data := max(fi.Size()-wavHeaderLen, 0) &^ 1
	dur := time.Duration(data/2) * time.Second / sampleRate
	if cdr.ID(id).Validate() != nil || data == 0 || dur < s.opts.MinMessage {
		_ = os.Remove(tmp)
		_ = os.Remove(filepath.Join(dir, "."+id+recSuffix))
		return fmt.Sprintf("removed %s (%s of audio)", tmp, dur), nil
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	err = finishWAV(f, data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = datadir.SyncDir(dir)
	}
	if err != nil {
		return "", fmt.Errorf("voicemail: promote %s: %w", tmp, err)
	}
	m := s.recoveredMeta(tenant, ext, dir, id)
	m.DurationMS = dur.Milliseconds()
	if err := s.finish(dir, &m); err != nil {
		return "", err
	}
	return fmt.Sprintf("promoted %s (%s of audio)", final, dur), nil
}

// recoveredMeta is the metadata written when recording began, or what the
// id and the directory say.
func (s *Store) recoveredMeta(tenant, ext, dir, id string) Message {
	m, err := readMessage(filepath.Join(dir, "."+id+recSuffix))
	if err != nil || m.ID != id {
		m = &Message{ID: id, ReceivedAt: s.messageTime(id)}
	}
	m.Tenant, m.Extension, m.Folder, m.HeardAt = tenant, ext, FolderNew, nil
	return *m
}

// Sweep removes the messages received before cut and returns how many.
func (s *Store) Sweep(cut time.Time) (int, error) {
	ms, err := s.List("", "")
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, m := range ms {
		if !m.ReceivedAt.Before(cut) {
			continue
		}
		if err := s.Delete(m.Tenant, m.Extension, m.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// JanitorPeriod is the time between two retention passes.
const JanitorPeriod = 24 * time.Hour

// Janitor removes messages older than retention at once and every
// JanitorPeriod until ctx ends; retention 0 keeps messages forever and
// returns at once.
func (s *Store) Janitor(ctx context.Context, retention time.Duration) {
	if retention <= 0 {
		return
	}
	t := time.NewTicker(JanitorPeriod)
	defer t.Stop()
	for {
		n, err := s.Sweep(s.opts.Now().Add(-retention))
		if n > 0 || err != nil {
			s.log.Info("voicemail retention", "removed", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
