package voicemail

import (
	"strconv"
	"strings"
	"time"
)

// numberWords are the prompt names that read n (0 <= n < 1000; larger
// numbers are read digit by digit).
func numberWords(n int) []string {
	switch {
	case n < 0:
		return nil
	case n < 20:
		return []string{strconv.Itoa(n)}
	case n < 100:
		out := []string{strconv.Itoa(n / 10 * 10)}
		if n%10 != 0 {
			out = append(out, strconv.Itoa(n%10))
		}
		return out
	case n < 1000:
		out := []string{strconv.Itoa(n / 100), "hundred"}
		if n%100 != 0 {
			out = append(out, numberWords(n%100)...)
		}
		return out
	}
	return digitWords(strconv.Itoa(n))
}

// digitWords reads the digits of s one by one (other characters skipped).
func digitWords(s string) []string {
	var out []string
	for _, c := range s {
		if c >= '0' && c <= '9' {
			out = append(out, string(c))
		}
	}
	return out
}

// dateWords reads the day of t as seen at now: today, yesterday, a weekday
// within the last week, else month and day.
func dateWords(t, now time.Time) []string {
	y1, m1, d1 := t.Date()
	y2, m2, d2 := now.Date()
	day := time.Date(y1, m1, d1, 0, 0, 0, 0, time.UTC)
	today := time.Date(y2, m2, d2, 0, 0, 0, 0, time.UTC)
	switch days := int(today.Sub(day).Hours() / 24); {
	case days == 0:
		return []string{"today"}
	case days == 1:
		return []string{"yesterday"}
	case days > 1 && days < 7:
		return []string{strings.ToLower(t.Weekday().String())}
	}
	return append([]string{strings.ToLower(m1.String())}, numberWords(d1)...)
}

// timeWords reads t's time of day on a 12-hour clock: "3" "oh" "5" "pm",
// "11" "30" "am", "12" "pm".
func timeWords(t time.Time) []string {
	h, m := t.Hour(), t.Minute()
	half := "am"
	if h >= 12 {
		half = "pm"
	}
	h %= 12
	if h == 0 {
		h = 12
	}
	out := numberWords(h)
	switch {
	case m == 0:
	case m < 10:
		out = append(out, "oh", strconv.Itoa(m))
	default:
		out = append(out, numberWords(m)...)
	}
	return append(out, half)
}

// envelopeWords introduce message n (counting from 1): its number, when it
// was received and who left it.
func envelopeWords(n int, m *Message, loc *time.Location, now time.Time) []string {
	out := append([]string{"vm-message"}, numberWords(n)...)
	at := m.ReceivedAt.In(loc)
	out = append(out, "vm-received")
	out = append(out, dateWords(at, now.In(loc))...)
	out = append(out, "at")
	out = append(out, timeWords(at)...)
	if d := digitWords(fromNumber(m.From)); len(d) > 0 {
		out = append(out, "vm-from")
		out = append(out, d...)
	}
	return out
}

// fromNumber is the user part of a caller given as a SIP URI, else s.
func fromNumber(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "sips:"), "sip:")
	if i := strings.IndexAny(s, "@;"); i >= 0 {
		s = s[:i]
	}
	return s
}
