package recording

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"pbx/appliance/cdr"
)

// Recover promotes what a crash left in recordings/inflight/; it runs at
// startup before any listener opens. A WAV gets its header repaired to the
// last whole frame, moves to its day directory and gets a sidecar with
// incomplete: true; a finished WAV whose sidecar was not yet written gets
// it. It returns one line per action, for the log.
func (s *Store) Recover() ([]string, error) {
	ents, err := os.ReadDir(s.inflight)
	if err != nil {
		return nil, fmt.Errorf("recording recovery: %w", err)
	}
	var actions []string
	var errs []error
	wavs := map[string]bool{}
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), audioExt); ok && cdr.ID(id).Validate() == nil {
			wavs[id] = true
		}
	}
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(s.inflight, name)
		if strings.HasPrefix(name, ".") { // a temporary file of an interrupted write
			os.Remove(path)
			continue
		}
		if id, ok := strings.CutSuffix(name, audioExt); ok && wavs[id] {
			act, err := s.recoverAudio(id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			actions = append(actions, act)
			continue
		}
		if id, ok := strings.CutSuffix(name, sidecarExt); ok && !wavs[id] && cdr.ID(id).Validate() == nil {
			act, err := s.recoverSidecar(id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			actions = append(actions, act)
		}
	}
	orphans, err := s.recoverOrphans()
	actions = append(actions, orphans...)
	return actions, errors.Join(append(errs, err)...)
}

// recoverOrphans gives a sidecar to every WAV in a day directory that has
// none and no in-flight description (the description would have done it):
// what the call record says (Options.Describe), else what the id says.
func (s *Store) recoverOrphans() ([]string, error) {
	days, err := s.days(math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, fmt.Errorf("recording recovery: %w", err)
	}
	var actions []string
	var errs []error
	for _, d := range days {
		ents, err := os.ReadDir(d.dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		names := map[string]bool{}
		for _, e := range ents {
			names[e.Name()] = true
		}
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), audioExt)
			if !ok || names[id+sidecarExt] || cdr.ID(id).Validate() != nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(s.inflight, id+sidecarExt)); err == nil {
				continue
			}
			act, err := s.recoverOrphan(d.dir, id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			actions = append(actions, act)
		}
	}
	return actions, errors.Join(errs...)
}

func (s *Store) recoverOrphan(dir, id string) (string, error) {
	start, _ := cdr.ID(id).Time()
	sc := Sidecar{ID: id, Start: start}
	known := false
	if s.opts.Describe != nil {
		if d, ok := s.opts.Describe(id); ok {
			sc, known = d, true
			sc.ID = id
		}
	}
	sc.Format = formatFor(0, sampleRate)
	sc.Format.SourceCodec = ""
	wav := filepath.Join(dir, id+audioExt)
	if sc.End.IsZero() {
		if fi, err := os.Stat(wav); err == nil {
			sc.End = fi.ModTime().UTC()
		}
	}
	if _, err := repairWAV(wav, sampleRate, 2); err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	if err := digest(wav, &sc); err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	side := filepath.Join(dir, id+sidecarExt)
	if err := writeSidecar(side, &sc); err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	if err := s.enqueue(&sc, wav, side); err != nil {
		return "", err
	}
	return fmt.Sprintf("recording %s of tenant %q: sidecar written for a WAV that had none (call record found: %t)", id, sc.Tenant, known), nil
}

// recoverAudio promotes an in-flight WAV as an incomplete recording.
func (s *Store) recoverAudio(id string) (string, error) {
	wav := filepath.Join(s.inflight, id+audioExt)
	meta := filepath.Join(s.inflight, id+sidecarExt)
	sc, err := readSidecar(meta)
	if err != nil {
		// No description (or a torn one): what the id says.
		start, _ := cdr.ID(id).Time()
		sc = &Sidecar{ID: id, Start: start, Format: formatFor(0, sampleRate)}
		sc.Format.SourceCodec = ""
	}
	sc.ID, sc.Incomplete = id, true
	fi, err := os.Stat(wav)
	if err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	sc.End = fi.ModTime().UTC()
	frames, err := repairWAV(wav, sc.Format.SampleRate, sc.Format.Channels)
	if err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	if err := s.promote(sc, wav, meta); err != nil {
		return "", err
	}
	return fmt.Sprintf("recording %s of tenant %q promoted incomplete: %d frames", id, sc.Tenant, frames), nil
}

// recoverSidecar handles an in-flight description whose WAV is gone: the
// WAV was moved to its day directory and the sidecar may not have been
// written; otherwise the description is stale.
func (s *Store) recoverSidecar(id string) (string, error) {
	meta := filepath.Join(s.inflight, id+sidecarExt)
	sc, err := readSidecar(meta)
	if err != nil || sc.ID != id {
		os.Remove(meta)
		return fmt.Sprintf("recording %s: unreadable in-flight description dropped", id), nil
	}
	dir := s.dayDir(sc.Tenant, sc.Start)
	wav, side := filepath.Join(dir, id+audioExt), filepath.Join(dir, id+sidecarExt)
	_, werr := os.Stat(wav)
	_, serr := os.Stat(side)
	if werr != nil {
		os.Remove(meta)
		return fmt.Sprintf("recording %s: stale in-flight description dropped", id), nil
	}
	if serr == nil {
		// Finished, but the upload may not have been queued.
		if disk, err := readSidecar(side); err == nil {
			if err := s.enqueue(disk, wav, side); err != nil {
				return "", err
			}
		}
		os.Remove(meta)
		return fmt.Sprintf("recording %s: finished; in-flight description dropped", id), nil
	}
	if sc.End.IsZero() {
		if fi, err := os.Stat(wav); err == nil {
			sc.End = fi.ModTime().UTC()
		}
	}
	if err := digest(wav, sc); err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	if err := writeSidecar(side, sc); err != nil {
		return "", fmt.Errorf("recover recording %s: %w", id, err)
	}
	if err := s.enqueue(sc, wav, side); err != nil {
		return "", err
	}
	os.Remove(meta)
	return fmt.Sprintf("recording %s of tenant %q: sidecar written", id, sc.Tenant), nil
}

// repairWAV cuts the file at path to its last whole frame and rewrites its
// header for what remains; it returns the frames kept.
func repairWAV(path string, rate, channels int) (int64, error) {
	if rate <= 0 {
		rate = sampleRate
	}
	if channels <= 0 {
		channels = 2
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	block := int64(2 * channels)
	data := max(fi.Size()-wavHeaderLen, 0) / block * block
	if err := f.Truncate(wavHeaderLen + data); err != nil {
		return 0, err
	}
	if _, err := f.WriteAt(wavHeader(rate, channels, data), 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return data / block, nil
}

// wavHeader is the canonical 44-byte header of 16-bit PCM with data bytes
// of audio, as rtpcore.WAVWriter writes it.
func wavHeader(rate, channels int, data int64) []byte {
	d := uint32(min(data, 0xFFFFFFFF-36))
	h := make([]byte, 0, wavHeaderLen)
	h = append(h, "RIFF"...)
	h = binary.LittleEndian.AppendUint32(h, 36+d)
	h = append(h, "WAVEfmt "...)
	h = binary.LittleEndian.AppendUint32(h, 16)
	h = binary.LittleEndian.AppendUint16(h, 1)
	h = binary.LittleEndian.AppendUint16(h, uint16(channels))
	h = binary.LittleEndian.AppendUint32(h, uint32(rate))
	h = binary.LittleEndian.AppendUint32(h, uint32(rate*channels*2))
	h = binary.LittleEndian.AppendUint16(h, uint16(channels*2))
	h = binary.LittleEndian.AppendUint16(h, 16)
	h = append(h, "data"...)
	return binary.LittleEndian.AppendUint32(h, d)
}
