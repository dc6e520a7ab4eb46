package guard

import (
	"time"

	"pbx/db"
)

// minutes counts a tenant's outbound time in the clock hour and the
// calendar month it was used in, in the tenant's time zone. It is the
// persisted db.Minutes: the budgets outboundMinutesPerHour and
// outboundMinutesPerMonth apply to the current hour and month.
type minutes db.Minutes

// hourStart is the start of t's clock hour in loc. Zone offsets change on
// hour boundaries (DST), so the start is t less its minutes and seconds
// past the hour, which also holds for zones offset by a half hour.
func hourStart(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	past := time.Duration(lt.Minute())*time.Minute + time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	return t.Add(-past)
}

// monthStart is the start of t's calendar month in loc.
func monthStart(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	return time.Date(lt.Year(), lt.Month(), 1, 0, 0, 0, 0, loc)
}

// add counts the time from from to to, split at the hour (and so month)
// boundaries of loc: each part counts in the hour and month it was used in.
func (m *minutes) add(from, to time.Time, loc *time.Location) {
	for from.Before(to) {
		hs := hourStart(from, loc)
		end := hs.Add(time.Hour)
		if to.Before(end) {
			end = to
		}
		m.count(hs, monthStart(from, loc), end.Sub(from))
		from = end
	}
}

// count adds d to the hour starting at hs and the month starting at ms; a
// later hour or month replaces the one counted so far, an earlier one (a
// clock step back) counts nothing.
func (m *minutes) count(hs, ms time.Time, d time.Duration) {
	switch {
	case hs.After(m.HourStart):
		m.HourStart, m.Hour = hs, d
	case hs.Equal(m.HourStart):
		m.Hour += d
	}
	switch {
	case ms.After(m.MonthStart):
		m.MonthStart, m.Month = ms, d
	case ms.Equal(m.MonthStart):
		m.Month += d
	}
}

// used returns the time counted in now's hour and month.
func (m *minutes) used(now time.Time, loc *time.Location) (hour, month time.Duration) {
	if m.HourStart.Equal(hourStart(now, loc)) {
		hour = m.Hour
	}
	if m.MonthStart.Equal(monthStart(now, loc)) {
		month = m.Month
	}
	return hour, month
}
