package cdr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"pbx/sipcore/calls"
)

// ReindexOptions selects the days Reindex rebuilds.
type ReindexOptions struct {
	// Tenant limits to one tenant; empty means all.
	Tenant string
	// From and To are inclusive day-directory dates (YYYY-MM-DD as
	// time.Time, only the date counts); zero means open.
	From, To time.Time
	// Progress, when set, is called after each day (from one goroutine at a
	// time) with the days done and the days to do.
	Progress func(done, total int)
	// Workers reading record files; zero means GOMAXPROCS.
	Workers int
}

// ReindexResult says what Reindex did.
type ReindexResult struct {
	Days       int      // day directories looked at
	Records    int      // record files indexed
	Changed    []string // index files replaced, relative to the data directory
	Unreadable []string // record files that could not be read (no line)
}

// Reindex regenerates the index of each selected day from its record files
// (lines ordered by start then id) and replaces the index atomically when it
// differs. It is meant for offline use (hold the data directory lock); a
// second run changes nothing.
func (s *Store) Reindex(ctx context.Context, opts ReindexOptions) (ReindexResult, error) {
	var res ReindexResult
	var tenants []string
	if opts.Tenant != "" {
		if err := ValidateTenant(opts.Tenant); err != nil {
			return res, err
		}
		tenants = []string{opts.Tenant}
	} else {
		var err error
		if tenants, err = s.tenants(); err != nil {
			return res, err
		}
	}
	var from, to date
	if !opts.From.IsZero() {
		from = dateOf(opts.From)
	}
	if !opts.To.IsZero() {
		to = dateOf(opts.To)
	}
	var days []day
	for _, t := range tenants {
		ds, err := s.listDays(t, from, to)
		if err != nil {
			return res, fmt.Errorf("list days of %s: %w", t, err)
		}
		days = append(days, ds...)
	}
	res.Days = len(days)
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan day)
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range jobs {
				n, changed, bad, err := s.reindexDay(d)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				res.Records += n
				if changed {
					rel, _ := filepath.Rel(s.root, d.index())
					res.Changed = append(res.Changed, rel)
				}
				res.Unreadable = append(res.Unreadable, bad...)
				done++
				if opts.Progress != nil {
					opts.Progress(done, len(days))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, d := range days {
		select {
		case jobs <- d:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	slices.Sort(res.Changed)
	slices.Sort(res.Unreadable)
	if firstErr != nil {
		return res, firstErr
	}
	return res, ctx.Err()
}

// indexSource is the part of a record file an index line needs; decoding
// only these fields is several times faster than decoding a Record.
type indexSource struct {
	ID         ID              `json:"id"`
	Tenant     string          `json:"tenant"`
	Direction  calls.Direction `json:"direction"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	DID        string          `json:"did"`
	Trunk      string          `json:"trunk"`
	Extension  string          `json:"extension"`
	Start      time.Time       `json:"start"`
	Answer     json.RawMessage `json:"answer"`
	Cause      calls.Cause     `json:"cause"`
	DurationMS int64           `json:"duration_ms"`
	Recording  string          `json:"recording"`
	Voicemail  string          `json:"voicemail"`
}

func (x *indexSource) entry() Entry {
	e := Entry{ID: x.ID, Start: msUTC(x.Start), Direction: x.Direction, From: x.From, To: x.To, DID: x.DID,
		Trunk: x.Trunk, Extension: x.Extension, Cause: x.Cause, DurationMS: x.DurationMS,
		Answered: len(x.Answer) > 0 && string(x.Answer) != "null", Rec: x.Recording != "", VM: x.Voicemail != ""}
	e.startMS = e.Start.UnixMilli()
	return e
}

func (s *Store) reindexDay(d day) (n int, changed bool, unreadable []string, err error) {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, nil, nil
		}
		return 0, false, nil, fmt.Errorf("read %s: %w", d.dir, err)
	}
	es := make([]Entry, 0, len(ents))
	for _, f := range ents {
		name := f.Name()
		if f.IsDir() || !strings.HasSuffix(name, recordExt) {
			continue
		}
		id := ID(strings.TrimSuffix(name, recordExt))
		if id.Validate() != nil {
			continue
		}
		path := filepath.Join(d.dir, name)
		data, err := os.ReadFile(path)
		var x indexSource
		if err == nil {
			err = json.Unmarshal(data, &x)
		}
		if err == nil && (x.ID != id || x.Tenant != d.tenant || x.Start.IsZero()) {
			err = errors.New("record names another id or tenant, or has no start")
		}
		if err != nil {
			rel, _ := filepath.Rel(s.root, path)
			unreadable = append(unreadable, rel)
			continue
		}
		es = append(es, x.entry())
	}
	sortOldestFirst(es)
	buf := make([]byte, 0, len(es)*200)
	for _, e := range es {
		buf = e.AppendLine(buf)
	}
	path := d.index()
	mu := s.indexLock(path)
	mu.Lock()
	defer mu.Unlock()
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, false, unreadable, fmt.Errorf("read %s: %w", path, err)
	}
	if bytes.Equal(old, buf) && (err == nil || len(buf) == 0) {
		return len(es), false, unreadable, nil
	}
	if err := writeAtomic(path, buf); err != nil {
		return 0, false, unreadable, fmt.Errorf("write %s: %w", path, err)
	}
	return len(es), true, unreadable, nil
}

// sortOldestFirst orders index entries as an index file holds them: the
// oldest first, the reverse of newer.
func sortOldestFirst(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if newer(&a, &b) {
			return 1
		}
		if newer(&b, &a) {
			return -1
		}
		return 0
	})
}
