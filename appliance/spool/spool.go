// Package spool keeps durable jobs as files, the way the upload queue and
// the voicemail notice outbox do: one JSON file per job under
// <root>/pending/<id>.json, written crash-safely before the job's first
// attempt and rewritten after each (the file is the truth), removed when
// the job is done, moved to <root>/failed/ when it is given up, where
// nothing deletes it. A file in pending/ that is not a job is quarantined
// in failed/ as it is.
package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pbx/appliance/datadir"
)

// Spool is a pending/ and failed/ pair of directories.
type Spool struct {
	pending, failed string
}

// Open creates root/pending and root/failed when missing.
func Open(root string) (*Spool, error) {
	s := &Spool{pending: filepath.Join(root, "pending"), failed: filepath.Join(root, "failed")}
	for _, d := range []string{s.pending, s.failed} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Path is where job id's file lives while pending.
func (s *Spool) Path(id string) string { return filepath.Join(s.pending, FileOf(id)) }

// Bad is a pending file that is not a job: quarantined in failed/ (Err is
// why it is not a job, Moved whether the move worked).
type Bad struct {
	Name  string
	Err   error
	Moved error
}

// FileOf is the name of job id's file.
func FileOf(id string) string { return id + ".json" }

// Load reads every job file in pending/ and hands it to take with its
// file name; take keeps the job or returns why the file is not one (its
// id must name the file: FileOf). A temporary file an interrupted rewrite
// left (its name starts with a dot) is removed; a file take refuses is
// moved to failed/ as it is and listed in bad.
func (s *Spool) Load(take func(file string, b []byte) error) (bad []Bad, err error) {
	ents, err := os.ReadDir(s.pending)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		path := filepath.Join(s.pending, e.Name())
		if strings.HasPrefix(e.Name(), ".") {
			_ = os.Remove(path)
			continue
		}
		b, err := os.ReadFile(path)
		if err == nil {
			err = take(e.Name(), b)
		}
		if err != nil {
			bad = append(bad, Bad{Name: e.Name(), Err: fmt.Errorf("job file %s: %w", e.Name(), err),
				Moved: os.Rename(path, filepath.Join(s.failed, e.Name()))})
		}
	}
	return bad, nil
}

// Write stores job id (v encoded as indented JSON) crash-safely.
func (s *Spool) Write(id string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFile(s.Path(id), append(b, '\n'), 0o640)
}

// Remove deletes job id's file (a done job); a file already gone is fine.
func (s *Spool) Remove(id string) error {
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return datadir.SyncDir(s.pending)
}

// Fail moves job id's file to failed/, where nothing deletes it; the job
// is in exactly one of the two directories at every moment.
func (s *Spool) Fail(id string) error {
	if err := os.Rename(s.Path(id), filepath.Join(s.failed, FileOf(id))); err != nil {
		return err
	}
	if err := datadir.SyncDir(s.failed); err != nil {
		return err
	}
	return datadir.SyncDir(s.pending)
}

// Backoff is the wait after a job's n-th failed attempt: first, doubling
// with each attempt up to ceiling, with jitter in its upper half (so jobs
// that failed together do not retry together).
func Backoff(n int, first, ceiling time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return d/2 + rand.N(d/2+1)
}
