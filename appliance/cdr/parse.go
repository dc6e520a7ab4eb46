package cdr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"pbx/sipcore/calls"
)

var errSlowPath = errors.New("not in the fast form")

// ParseLine parses one index line (without or with its trailing newline).
// It refuses lines that are not a single JSON object, whose id is invalid,
// or whose start is missing or out of range. Lines in the form AppendLine
// writes take a fast path that makes one allocation; anything else (escapes,
// other key orders, unknown keys, other time forms) goes through
// encoding/json with the same result.
func ParseLine(line []byte) (Entry, error) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || line[0] != '{' || line[len(line)-1] != '}' {
		return Entry{}, fmt.Errorf("index line: not a JSON object")
	}
	e, err := parseFast(line)
	if errors.Is(err, errSlowPath) {
		e, err = parseSlow(line)
	}
	if err != nil {
		return Entry{}, err
	}
	if err := e.ID.Validate(); err != nil {
		return Entry{}, fmt.Errorf("index line: %w", err)
	}
	if e.Start.IsZero() || e.Start.Year() < 1970 || e.Start.Year() > 9999 {
		return Entry{}, fmt.Errorf("index line: start missing or out of range")
	}
	e.Start = msUTC(e.Start)
	e.startMS = e.Start.UnixMilli()
	return e, nil
}

func parseSlow(line []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(line, &e); err != nil {
		return Entry{}, fmt.Errorf("index line: %w", err)
	}
	if e.Tenant != "" {
		return Entry{}, fmt.Errorf("index line: tenant field not expected")
	}
	return e, nil
}

// parseFast reads {"key":value,...} where every value is a string without
// escapes, true, false or a non-negative integer, each key known and seen
// once. Anything else is errSlowPath.
func parseFast(b []byte) (Entry, error) {
	var e Entry
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return e, errSlowPath
	}
	s := string(b) // the one allocation: fields are substrings of it
	i := 1
	var seen uint16
	for {
		if i >= len(s) {
			return e, errSlowPath
		}
		if s[i] != '"' {
			return e, errSlowPath
		}
		j := i + 1
		for j < len(s) && s[j] != '"' && s[j] != '\\' {
			j++
		}
		if j+1 >= len(s) || s[j] != '"' || s[j+1] != ':' {
			return e, errSlowPath
		}
		key := s[i+1 : j]
		i = j + 2
		if i >= len(s) {
			return e, errSlowPath
		}
		var str string
		var num int64
		var flag bool
		kind := s[i]
		switch {
		case kind == '"':
			k := i + 1
			for k < len(s) && s[k] != '"' && s[k] != '\\' && s[k] >= 0x20 && s[k] < 0x80 {
				k++
			}
			if k >= len(s) || s[k] != '"' {
				return e, errSlowPath
			}
			str = s[i+1 : k]
			i = k + 1
		case kind == 't' && len(s) >= i+4 && s[i:i+4] == "true":
			flag, i = true, i+4
		case kind == 'f' && len(s) >= i+5 && s[i:i+5] == "false":
			i += 5
		case kind >= '0' && kind <= '9':
			k := i
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				if k-i >= 15 {
					return e, errSlowPath
				}
				num = num*10 + int64(s[k]-'0')
				k++
			}
			if s[i] == '0' && k-i > 1 {
				return e, errSlowPath
			}
			i = k
		default:
			return e, errSlowPath
		}
		var bit uint16
		ok := true
		switch key {
		case "id":
			bit, ok = 1<<0, kind == '"'
			e.ID = ID(str)
		case "start":
			bit, ok = 1<<1, kind == '"'
			if ok {
				t, err := parseUTCMillis(str)
				if err != nil {
					return e, errSlowPath
				}
				e.Start = t
			}
		case "direction":
			bit, ok = 1<<2, kind == '"'
			e.Direction = calls.Direction(str)
		case "from":
			bit, ok = 1<<3, kind == '"'
			e.From = str
		case "to":
			bit, ok = 1<<4, kind == '"'
			e.To = str
		case "did":
			bit, ok = 1<<5, kind == '"'
			e.DID = str
		case "trunk":
			bit, ok = 1<<6, kind == '"'
			e.Trunk = str
		case "extension":
			bit, ok = 1<<7, kind == '"'
			e.Extension = str
		case "answered":
			bit, ok = 1<<8, kind == 't' || kind == 'f'
			e.Answered = flag
		case "cause":
			bit, ok = 1<<9, kind == '"'
			e.Cause = calls.Cause(str)
		case "duration_ms":
			bit, ok = 1<<10, kind >= '0' && kind <= '9'
			e.DurationMS = num
		case "rec":
			bit, ok = 1<<11, kind == 't' || kind == 'f'
			e.Rec = flag
		case "vm":
			bit, ok = 1<<12, kind == 't' || kind == 'f'
			e.VM = flag
		default:
			return e, errSlowPath
		}
		if !ok || seen&bit != 0 {
			return e, errSlowPath
		}
		seen |= bit
		if i < len(s) && s[i] == ',' {
			i++
			continue
		}
		if i == len(s)-1 && s[i] == '}' {
			return e, nil
		}
		return e, errSlowPath
	}
}

// parseUTCMillis parses YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z as written by
// time.Time's JSON encoding of a UTC time.
func parseUTCMillis(s string) (time.Time, error) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, errSlowPath
	}
	num := func(a, b int) int {
		n := 0
		for k := a; k < b; k++ {
			c := s[k]
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, mo, d, h, mi, se := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59 {
		return time.Time{}, errSlowPath
	}
	ns := 0
	if len(s) > 20 {
		frac := s[20 : len(s)-1]
		if s[19] != '.' || len(frac) < 1 || len(frac) > 9 {
			return time.Time{}, errSlowPath
		}
		ns = num(20, len(s)-1)
		if ns < 0 {
			return time.Time{}, errSlowPath
		}
		for k := len(frac); k < 9; k++ {
			ns *= 10
		}
	} else if s[19] != 'Z' {
		return time.Time{}, errSlowPath
	}
	t := time.Date(y, time.Month(mo), d, h, mi, se, ns, time.UTC)
	if t.Day() != d { // 31 February and the like
		return time.Time{}, errSlowPath
	}
	return t, nil
}
