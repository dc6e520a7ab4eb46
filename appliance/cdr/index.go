package cdr

import (
	"fmt"
	"time"

	"pbx/sipcore/calls"
)

// IndexFile is the name of a day's index inside its day directory.
const IndexFile = "index.jsonl"

// Entry is one line of a day's index.jsonl and the shape of a record in a
// listing. The index line carries what filtering and listing need; Tenant is
// not stored in the line (the directory names it) and is filled in by List.
type Entry struct {
	Tenant     string          `json:"tenant,omitempty"`
	ID         ID              `json:"id"`
	Start      time.Time       `json:"start"`
	Direction  calls.Direction `json:"direction"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	DID        string          `json:"did"`
	Trunk      string          `json:"trunk"`
	Extension  string          `json:"extension"`
	Answered   bool            `json:"answered"`
	Cause      calls.Cause     `json:"cause"`
	DurationMS int64           `json:"duration_ms"`
	Rec        bool            `json:"rec"`
	VM         bool            `json:"vm"`

	startMS int64 // Start in Unix milliseconds, the sort key with ID
}

// AppendLine appends the entry's index line, newline included, to b. The
// tenant is not written.
func (e Entry) AppendLine(b []byte) []byte {
	e.Tenant = ""
	e.Start = msUTC(e.Start)
	b, err := appendEntry(b, &e)
	if err != nil {
		// Entry has only strings, bools, ints and a time: encoding cannot
		// fail unless the time is outside year 0..9999, which validate
		// refuses.
		panic(fmt.Sprintf("cdr: marshal index entry: %v", err))
	}
	return append(b, '\n')
}

// before reports whether e sorts after (is older than) the position
// (ms, id) in listing order, which is newest first by (start, id).
func (e *Entry) before(ms int64, id ID) bool {
	if e.startMS != ms {
		return e.startMS < ms
	}
	return e.ID < id
}

// newer reports whether a comes before b in listing order.
func newer(a, b *Entry) bool {
	if a.startMS != b.startMS {
		return a.startMS > b.startMS
	}
	return a.ID > b.ID
}
