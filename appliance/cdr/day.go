package cdr

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// date is a calendar date naming a day directory (the tenant's local date).
type date struct {
	y    int
	m, d int
}

func dateOf(t time.Time) date {
	y, m, d := t.Date()
	return date{y, int(m), d}
}

func (d date) path() string {
	return fmt.Sprintf("%04d/%02d/%02d", d.y, d.m, d.d)
}

func (d date) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", d.y, d.m, d.d)
}

func (d date) less(o date) bool {
	if d.y != o.y {
		return d.y < o.y
	}
	if d.m != o.m {
		return d.m < o.m
	}
	return d.d < o.d
}

// midnightUTC is 00:00 UTC of the date.
func (d date) midnightUTC() time.Time {
	return time.Date(d.y, time.Month(d.m), d.d, 0, 0, 0, 0, time.UTC)
}

// bounds are conservative Unix-millisecond bounds of the starts a day
// directory can hold, whatever the tenant's zone was when it was written
// (UTC offsets span -12h..+14h): [00:00 UTC - 14h, 24:00 UTC + 12h). They do
// not depend on the current zone setting, so listing stays correct after a
// tenant's time zone changes.
func (d date) bounds() (lo, hi int64) {
	m := d.midnightUTC()
	return m.Add(-14 * time.Hour).UnixMilli(), m.Add(36 * time.Hour).UnixMilli()
}

// ParseDate parses YYYY-MM-DD.
func ParseDate(s string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	return t, nil
}

// day is one day directory of one tenant.
type day struct {
	tenant string
	date   date
	dir    string
}

func (d day) index() string { return filepath.Join(d.dir, IndexFile) }

// listDays returns the day directories of a tenant, newest first, whose
// date lies in [from, to] (zero dates are open ends). Entries that are not
// YYYY/MM/DD directories are ignored. A missing cdr directory is no days.
func (s *Store) listDays(tenant string, from, to date) ([]day, error) {
	root := s.tenantDir(tenant)
	years, err := readNumDirs(root, 4, 1, 9999)
	if err != nil {
		return nil, err
	}
	var out []day
	for _, y := range years {
		if (from.y != 0 && y < from.y) || (to.y != 0 && y > to.y) {
			continue
		}
		ydir := filepath.Join(root, fmt.Sprintf("%04d", y))
		months, err := readNumDirs(ydir, 2, 1, 12)
		if err != nil {
			return nil, err
		}
		for _, m := range months {
			if (from.y != 0 && (date{y, m, 31}).less(from)) || (to.y != 0 && to.less(date{y, m, 1})) {
				continue
			}
			mdir := filepath.Join(ydir, fmt.Sprintf("%02d", m))
			days, err := readNumDirs(mdir, 2, 1, 31)
			if err != nil {
				return nil, err
			}
			for _, dd := range days {
				dt := date{y, m, dd}
				if (from.y != 0 && dt.less(from)) || (to.y != 0 && to.less(dt)) {
					continue
				}
				out = append(out, day{tenant: tenant, date: dt, dir: filepath.Join(mdir, fmt.Sprintf("%02d", dd))})
			}
		}
	}
	return out, nil
}

// readNumDirs lists the subdirectories of dir whose names are width-digit
// numbers in [lo, hi], newest (largest) first.
func readNumDirs(dir string, width, lo, hi int) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []int
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || len(name) != width {
			continue
		}
		n, err := strconv.Atoi(name)
		if err != nil || n < lo || n > hi || name[0] == '+' || name[0] == '-' {
			continue
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b int) int { return b - a })
	return out, nil
}

// tenants lists the tenant directories under the data directory that hold
// a cdr directory, sorted.
func (s *Store) tenants() ([]string, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read data directory: %w", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || ValidateTenant(e.Name()) != nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join(s.root, e.Name(), cdrDir)); err == nil && fi.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
