package cdr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ActRestored: a committed record whose file a crash lost or tore was
// written again from the commit journal.
const ActRestored ActionKind = "record_restored"

// journalPath is where the commit journal lives.
func (s *Store) journalPath() string {
	return filepath.Join(s.root, journalName)
}

// journalFor returns the open commit journal, opening it (after replaying
// what a previous run left in it) on first use; nil when it cannot be
// opened (commits then fsync each record file).
func (s *Store) journalFor() *journal {
	s.jOnce.Do(func() {
		if !s.jReplayed.Load() {
			if _, _, err := s.replayJournal(false); err != nil {
				s.log.Warn("commit journal not replayed; records are synced one by one", "err", err)
				return
			}
		}
		j, err := openJournal(s.journalPath(), func() error { return syncFS(s.root) })
		if err != nil {
			os.Remove(s.journalPath()) // a partial file holds nothing yet, and takes room
			s.log.Warn("commit journal not opened; records are synced one by one", "err", err)
			return
		}
		j.epoch = uint64(time.Now().UnixNano())
		s.journal.Store(j)
	})
	return s.journal.Load()
}

// replayJournal writes again, durably, every record of the commit journal
// whose file is missing or differs from its entry, and returns the
// actions and, per tenant, the days it touched (their indexes are then
// checked). With dry it only reports. Entries of days the retention has
// removed are skipped.
func (s *Store) replayJournal(dry bool) ([]Action, map[string][]day, error) {
	entries, err := readJournal(s.journalPath())
	if err != nil {
		return nil, nil, fmt.Errorf("read commit journal: %w", err)
	}
	var acts []Action
	days := map[string][]day{}
	for _, e := range entries {
		d, id, ok := s.journalTarget(e)
		if !ok {
			continue
		}
		final := filepath.Join(d.dir, string(id)+recordExt)
		if b, err := os.ReadFile(final); err == nil && bytes.Equal(b, e.data) {
			continue
		}
		if !dry {
			if err := ensureDir(d.dir); err != nil {
				return acts, days, fmt.Errorf("restore %s: %w", e.rel, err)
			}
			if err := writeAtomic(final, e.data); err != nil {
				return acts, days, fmt.Errorf("restore %s: %w", e.rel, err)
			}
		}
		acts = append(acts, Action{Kind: ActRestored, Tenant: d.tenant, ID: id, Path: e.rel,
			Detail: "record file lost or torn by a crash, written again from the commit journal"})
		if !containsDay(days[d.tenant], d) {
			days[d.tenant] = append(days[d.tenant], d)
		}
	}
	if !dry {
		s.jReplayed.Store(true)
	}
	return acts, days, nil
}

// journalTarget checks an entry: its path is <tenant>/cdr/YYYY/MM/DD/<id>.json
// and its data a finished record of that tenant and id, of a day the
// retention keeps.
func (s *Store) journalTarget(e journalEntry) (day, ID, bool) {
	parts := strings.Split(e.rel, "/")
	if len(parts) != 6 || parts[1] != cdrDir || ValidateTenant(parts[0]) != nil || !strings.HasSuffix(parts[5], recordExt) {
		return day{}, "", false
	}
	id := ID(strings.TrimSuffix(parts[5], recordExt))
	y, ey := strconv.Atoi(parts[2])
	m, em := strconv.Atoi(parts[3])
	dd, ed := strconv.Atoi(parts[4])
	if id.Validate() != nil || ey != nil || em != nil || ed != nil {
		return day{}, "", false
	}
	dt := date{y, m, dd}
	if dt.path() != strings.Join(parts[2:5], "/") {
		return day{}, "", false
	}
	var r Record
	if json.Unmarshal(e.data, &r) != nil || r.ID != id || r.Tenant != parts[0] || r.validate(true) != nil {
		return day{}, "", false
	}
	if s.opts.Retention > 0 {
		end := time.Date(y, time.Month(m), dd+1, 0, 0, 0, 0, s.location(parts[0]))
		if !end.After(s.opts.Now().Add(-s.opts.Retention)) {
			return day{}, "", false
		}
	}
	return day{tenant: parts[0], date: dt, dir: s.dayDirOf(parts[0], dt)}, id, true
}

func containsDay(ds []day, d day) bool {
	for _, x := range ds {
		if x.dir == d.dir {
			return true
		}
	}
	return false
}
