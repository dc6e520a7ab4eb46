package cdr

import (
	"bytes"
	"container/list"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
)

// dayCache keeps, for every index file List has read, a small summary used
// to skip the whole day for a filter (counts, directions, trunks,
// extensions, start range, and a Bloom filter of the 6-character substrings
// of from, to and did) and, for the most recently used days, the parsed
// lines sorted in listing order. A day is re-validated with one stat per
// use: when the file grew (appends) only the new bytes are read; when it
// shrank or was replaced (repair, reindex) it is read again in full.
type dayCache struct {
	mu      sync.Mutex // guards days, lru, loaded and every dayState.entries
	days    map[string]*dayState
	lru     list.List // of *dayState whose entries are loaded, most recent first
	loaded  int       // entries held across days
	maxHeld int
}

type dayState struct {
	path string

	mu       sync.Mutex // serialises refreshes of this day
	fi       os.FileInfo
	seen     int64 // file size at the last refresh
	consumed int64 // bytes parsed: up to the last newline seen
	sum      summary
	bad      int // lines that did not parse

	entries []Entry // guarded by dayCache.mu; newest first; nil when evicted
	elem    *list.Element
}

func newDayCache(maxHeld int) *dayCache {
	return &dayCache{days: map[string]*dayState{}, maxHeld: maxHeld}
}

func (c *dayCache) state(path string) *dayState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.days[path]
	if st == nil {
		st = &dayState{path: path}
		c.days[path] = st
	}
	return st
}

// forget drops a day (its directory was removed).
func (c *dayCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.days[path]; st != nil {
		c.dropEntriesLocked(st)
		delete(c.days, path)
	}
}

func (c *dayCache) dropEntriesLocked(st *dayState) {
	if st.elem != nil {
		c.lru.Remove(st.elem)
		st.elem = nil
	}
	c.loaded -= len(st.entries)
	st.entries = nil
}

// setEntries installs a new (copied-on-write) entry slice for st and evicts
// the least recently used days beyond the bound; st itself is kept.
func (c *dayCache) setEntries(st *dayState, es []Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded -= len(st.entries)
	st.entries = es
	c.loaded += len(es)
	if st.elem == nil {
		st.elem = c.lru.PushFront(st)
	} else {
		c.lru.MoveToFront(st.elem)
	}
	for c.loaded > c.maxHeld {
		back := c.lru.Back()
		if back == nil || back.Value.(*dayState) == st {
			break
		}
		c.dropEntriesLocked(back.Value.(*dayState))
	}
}

func (c *dayCache) entriesOf(st *dayState) []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.entries != nil && st.elem != nil {
		c.lru.MoveToFront(st.elem)
	}
	return st.entries
}

// dayView is what List learns about one day.
type dayView struct {
	pass         bool  // the summary says the filter may match
	minMS, maxMS int64 // start range of the day's lines
	entries      []Entry
}

// view refreshes the day's state from its index file and reports whether
// f may match; with load it also returns the parsed lines (newest first).
// A missing index file is an empty day.
func (c *dayCache) view(path string, f *filter, load bool) (dayView, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			c.forget(path)
			return dayView{}, nil
		}
		return dayView{}, err
	}
	st := c.state(path)
	st.mu.Lock()
	defer st.mu.Unlock()

	have := c.entriesOf(st)
	var err2 error
	switch {
	case st.fi != nil && os.SameFile(st.fi, fi) && fi.Size() == st.seen && fi.ModTime().Equal(st.fi.ModTime()) && (!load || have != nil):
		// unchanged
	case st.fi != nil && os.SameFile(st.fi, fi) && fi.Size() > st.seen && (!load || have != nil) && !st.sum.bloom.overfull():
		have, err2 = c.tail(st, fi, have)
	default:
		have, err2 = c.full(st, fi, load)
	}
	if err2 != nil {
		return dayView{}, err2
	}
	// have is this refresh's snapshot: the cache may evict the day at any
	// time, the snapshot stays valid.
	v := dayView{pass: st.sum.match(f), minMS: st.sum.minMS, maxMS: st.sum.maxMS}
	if load && v.pass {
		v.entries = have
	}
	return v, nil
}

// full reads the whole index file. The parsed lines are kept only when
// asked for, so a scan of summaries (a selective filter, Warm) does not push
// the days in use out of the cache.
func (c *dayCache) full(st *dayState, fi os.FileInfo, keep bool) ([]Entry, error) {
	data, err := os.ReadFile(st.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			data = nil
		} else {
			return nil, err
		}
	}
	consumed := bytes.LastIndexByte(data, '\n') + 1
	lines := bytes.Count(data[:consumed], []byte{'\n'})
	es := make([]Entry, 0, lines)
	st.bad = 0
	rest := data[:consumed]
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i]
		rest = rest[i+1:]
		if len(line) == 0 {
			continue
		}
		e, err := ParseLine(line)
		if err != nil {
			st.bad++
			continue
		}
		es = append(es, e)
	}
	sortEntries(&es)
	st.sum = newSummary(es)
	st.fi = fi
	st.seen = int64(len(data))
	st.consumed = int64(consumed)
	if keep {
		c.setEntries(st, es)
	} else {
		c.mu.Lock()
		c.dropEntriesLocked(st)
		c.mu.Unlock()
	}
	return es, nil
}

// tail reads what was appended since the last refresh.
func (c *dayCache) tail(st *dayState, fi os.FileInfo, have []Entry) ([]Entry, error) {
	f, err := os.Open(st.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, fi.Size()-st.consumed)
	n, err := f.ReadAt(buf, st.consumed)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	buf = buf[:n]
	end := bytes.LastIndexByte(buf, '\n') + 1
	var add []Entry
	rest := buf[:end]
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i]
		rest = rest[i+1:]
		if len(line) == 0 {
			continue
		}
		e, err := ParseLine(line)
		if err != nil {
			st.bad++
			continue
		}
		add = append(add, e)
		st.sum.add(&e)
	}
	st.fi = fi
	st.seen = st.consumed + int64(n)
	st.consumed += int64(end)
	if len(add) > 0 && have != nil {
		es := make([]Entry, 0, len(have)+len(add))
		es = append(es, have...)
		es = append(es, add...)
		sortEntries(&es)
		c.setEntries(st, es)
		return es, nil
	} else if len(add) > 0 {
		c.mu.Lock()
		c.dropEntriesLocked(st)
		c.mu.Unlock()
	}
	return have, nil
}

// sortEntries orders newest first by (start, id) and removes duplicate ids
// (a line written twice).
func sortEntries(es *[]Entry) {
	s := *es
	slices.SortFunc(s, func(a, b Entry) int {
		switch {
		case newer(&a, &b):
			return -1
		case newer(&b, &a):
			return 1
		}
		return 0
	})
	*es = slices.CompactFunc(s, func(a, b Entry) bool { return a.ID == b.ID && a.startMS == b.startMS })
}
