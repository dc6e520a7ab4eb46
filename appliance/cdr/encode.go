package cdr

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// The record and index line encoders write what encoding/json writes for
// Record and Entry, byte for byte (TestEncodeMatchesJSON and
// FuzzEncodeRecord hold them to it), without its reflection: two records
// and an index line a call cost about 30 us of CPU through encoding/json
// at 500 calls/s. A field added to Record, Step, Leg, Digits or Entry must
// be added here too; the tests fail until it is.

// appendRecord appends r as encoding/json encodes it. It fails only for
// a time outside the years 0 to 9999, as json.Marshal does.
func appendRecord(b []byte, r *Record) ([]byte, error) {
	e := encoder{b: b}
	e.b = append(e.b, `{"id":`...)
	e.str(string(r.ID))
	e.key("tenant")
	e.str(r.Tenant)
	e.key("v")
	e.b = strconv.AppendInt(e.b, int64(r.V), 10)
	e.key("direction")
	e.str(string(r.Direction))
	e.key("call_id")
	e.str(r.CallID)
	e.key("dialog_id")
	e.str(r.DialogID)
	e.key("from")
	e.str(r.From)
	e.key("from_name")
	e.str(r.FromName)
	e.key("to")
	e.str(r.To)
	e.key("did")
	e.str(r.DID)
	e.key("trunk")
	e.str(r.Trunk)
	e.key("source")
	e.str(r.Source)
	e.key("extension")
	e.str(r.Extension)
	e.span(r.Start, r.Answer, r.End)
	e.key("duration_ms")
	e.b = strconv.AppendInt(e.b, r.DurationMS, 10)
	e.key("bill_ms")
	e.b = strconv.AppendInt(e.b, r.BillMS, 10)
	e.key("cause")
	e.str(string(r.Cause))
	e.key("sip_status")
	e.b = strconv.AppendInt(e.b, int64(r.SIPStatus), 10)
	e.key("reason")
	e.str(r.Reason)
	e.key("steps")
	e.steps(r.Steps)
	e.key("legs")
	e.legs(r.Legs)
	e.key("digits")
	e.digits(r.Digits)
	e.key("answered_by")
	e.str(r.AnsweredBy)
	e.key("incomplete")
	e.b = strconv.AppendBool(e.b, r.Incomplete)
	e.key("queue")
	e.str(r.Queue)
	e.key("recording")
	e.str(r.Recording)
	e.key("voicemail")
	e.str(r.Voicemail)
	e.b = append(e.b, '}')
	return e.b, e.err
}

// appendEntry appends e as encoding/json encodes it.
func appendEntry(b []byte, en *Entry) ([]byte, error) {
	e := encoder{b: append(b, '{')}
	if en.Tenant != "" {
		e.b = append(e.b, `"tenant":`...)
		e.str(en.Tenant)
		e.b = append(e.b, ',')
	}
	e.b = append(e.b, `"id":`...)
	e.str(string(en.ID))
	e.key("start")
	e.time(en.Start)
	e.key("direction")
	e.str(string(en.Direction))
	e.key("from")
	e.str(en.From)
	e.key("to")
	e.str(en.To)
	e.key("did")
	e.str(en.DID)
	e.key("trunk")
	e.str(en.Trunk)
	e.key("extension")
	e.str(en.Extension)
	e.key("answered")
	e.b = strconv.AppendBool(e.b, en.Answered)
	e.key("cause")
	e.str(string(en.Cause))
	e.key("duration_ms")
	e.b = strconv.AppendInt(e.b, en.DurationMS, 10)
	e.key("rec")
	e.b = strconv.AppendBool(e.b, en.Rec)
	e.key("vm")
	e.b = strconv.AppendBool(e.b, en.VM)
	e.b = append(e.b, '}')
	return e.b, e.err
}

type encoder struct {
	b   []byte
	err error
}

// key appends a comma and the key of the next field.
func (e *encoder) key(k string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

// span appends the start, answer (when there was one) and end fields a
// record and each of its legs have.
func (e *encoder) span(start time.Time, answer *time.Time, end time.Time) {
	e.key("start")
	e.time(start)
	if answer != nil {
		e.key("answer")
		e.time(*answer)
	}
	e.key("end")
	e.time(end)
}

func (e *encoder) time(t time.Time) {
	if y := t.Year(); y < 0 || y >= 10000 {
		if e.err == nil {
			e.err = fmt.Errorf("time %v: year outside of range [0,9999]", t)
		}
	}
	e.b = append(e.b, '"')
	e.b = t.AppendFormat(e.b, time.RFC3339Nano)
	e.b = append(e.b, '"')
}

func (e *encoder) steps(ss []Step) {
	encodeList(e, ss, func(s *Step) {
		e.b = append(e.b, `{"id":`...)
		e.str(s.ID)
		e.key("type")
		e.str(s.Type)
		e.key("skipped")
		e.b = strconv.AppendBool(e.b, s.Skipped)
		e.key("at")
		e.time(s.At)
		e.key("result")
		e.str(s.Result)
		e.key("error")
		e.str(s.Error)
		e.opt("kind", s.Kind)
		e.opt("by", s.By)
		e.opt("to", s.To)
	})
}

// encodeList appends xs as a JSON array (null when nil, as encoding/json
// writes a nil slice), each element an object that each writes from its
// opening brace on; encodeList closes it.
func encodeList[T any](e *encoder, xs []T, each func(*T)) {
	if xs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i := range xs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		each(&xs[i])
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, ']')
}

// opt appends a string field that is omitted when empty.
func (e *encoder) opt(k, v string) {
	if v != "" {
		e.key(k)
		e.str(v)
	}
}

func (e *encoder) legs(ls []Leg) {
	encodeList(e, ls, func(l *Leg) {
		e.b = append(e.b, `{"target":`...)
		e.str(l.Target)
		e.key("kind")
		e.str(l.Kind)
		e.span(l.Start, l.Answer, l.End)
		e.key("sip_status")
		e.b = strconv.AppendInt(e.b, int64(l.SIPStatus), 10)
		e.key("won")
		e.b = strconv.AppendBool(e.b, l.Won)
		e.key("cause")
		e.str(string(l.Cause))
	})
}

func (e *encoder) digits(ds []Digits) {
	encodeList(e, ds, func(d *Digits) {
		e.b = append(e.b, `{"step":`...)
		e.str(d.Step)
		e.key("type")
		e.str(d.Type)
		e.key("digits")
		e.str(d.Digits)
		e.key("at")
		e.time(d.At)
	})
}

const hexDigits = "0123456789abcdef"

// str appends s quoted as encoding/json quotes it by default: <, > and &
// escaped, invalid UTF-8 replaced, U+2028 and U+2029 escaped.
func (e *encoder) str(s string) {
	b := append(e.b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	e.b = append(b, '"')
}
