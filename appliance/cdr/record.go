package cdr

import (
	"fmt"
	"time"

	"pbx/sipcore/calls"
)

// Version is the value of the v field this package writes.
const Version = 1

// StepVoicemailCheck is the dialplan step whose digits (a mailbox PIN) are
// never recorded.
const StepVoicemailCheck = "voicemail_check"

// StepTransfer is a call transfer (REFER): Kind is blind or attended, By
// the transferring party, To the target; Result is the new leg's outcome.
const StepTransfer = "transfer"

// Step is one dialplan step the call ran.
type Step struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Skipped bool      `json:"skipped"`
	At      time.Time `json:"at"`
	Result  string    `json:"result"`
	Error   string    `json:"error"`
	// Kind, By and To describe a transfer step (beyond the specification's
	// fields, absent on other steps).
	Kind string `json:"kind,omitempty"`
	By   string `json:"by,omitempty"`
	To   string `json:"to,omitempty"`
}

// Leg is one outgoing leg (a contact, a trunk, a mobile bridge) the call
// tried.
type Leg struct {
	Target    string      `json:"target"`
	Kind      string      `json:"kind"`
	Start     time.Time   `json:"start"`
	Answer    *time.Time  `json:"answer,omitempty"`
	End       time.Time   `json:"end"`
	SIPStatus int         `json:"sip_status"`
	Won       bool        `json:"won"`
	Cause     calls.Cause `json:"cause"`
}

// Digits is DTMF the caller sent while a step ran.
type Digits struct {
	Step   string    `json:"step"` // the step's id
	Type   string    `json:"type"` // the step's type
	Digits string    `json:"digits"`
	At     time.Time `json:"at"`
}

// Record is one call record, as written to <id>.json and returned by Get.
type Record struct {
	ID         ID              `json:"id"`
	Tenant     string          `json:"tenant"`
	V          int             `json:"v"`
	Direction  calls.Direction `json:"direction"`
	CallID     string          `json:"call_id"`   // SIP Call-ID; never a path element
	DialogID   string          `json:"dialog_id"` // never a path element
	From       string          `json:"from"`
	FromName   string          `json:"from_name"`
	To         string          `json:"to"`
	DID        string          `json:"did"`
	Trunk      string          `json:"trunk"`
	Source     string          `json:"source"`
	Extension  string          `json:"extension"`
	Start      time.Time       `json:"start"`
	Answer     *time.Time      `json:"answer,omitempty"` // absent when never answered
	End        time.Time       `json:"end"`
	DurationMS int64           `json:"duration_ms"` // end - start
	BillMS     int64           `json:"bill_ms"`     // end - answer; zero unless answered
	Cause      calls.Cause     `json:"cause"`
	SIPStatus  int             `json:"sip_status"`
	Reason     string          `json:"reason"`
	Steps      []Step          `json:"steps"`
	Legs       []Leg           `json:"legs"`
	Digits     []Digits        `json:"digits"` // never those of a voicemail_check step
	AnsweredBy string          `json:"answered_by"`
	Incomplete bool            `json:"incomplete"` // recovered from an in-flight marker
	// Links to a queue visit, a recording and a voicemail message: declared,
	// always empty for now. The index booleans rec and vm derive from them.
	Queue     string `json:"queue"`
	Recording string `json:"recording"`
	Voicemail string `json:"voicemail"`
}

// NewRecord starts a record for a call of tenant that started at start,
// with a fresh id.
func NewRecord(tenant string, dir calls.Direction, start time.Time) *Record {
	start = start.UTC().Truncate(time.Millisecond)
	return NewRecordOf(NewID(start), tenant, dir, start)
}

// NewRecordOf is NewRecord for a call whose id is given (the call log's
// records take the call's id): no id is drawn, which costs a random read
// and a time formatting a record.
func NewRecordOf(id ID, tenant string, dir calls.Direction, start time.Time) *Record {
	r := RecordOf(id, tenant, dir, start)
	return &r
}

// RecordOf is NewRecordOf as a value, which a caller that keeps it on its
// stack does not allocate (the call log builds a record at each call's
// answer and end).
func RecordOf(id ID, tenant string, dir calls.Direction, start time.Time) Record {
	return Record{ID: id, Tenant: tenant, V: Version, Direction: dir, Start: start.UTC().Truncate(time.Millisecond)}
}

// AddStep appends a step.
func (r *Record) AddStep(s Step) { r.Steps = append(r.Steps, s) }

// AddLeg appends a leg.
func (r *Record) AddLeg(l Leg) { r.Legs = append(r.Legs, l) }

// AddDigits records DTMF the caller sent during a step. Digits sent during a
// voicemail_check step (a mailbox PIN) are dropped and AddDigits reports
// false; empty digits are dropped too.
func (r *Record) AddDigits(stepID, stepType, digits string, at time.Time) bool {
	if stepType == StepVoicemailCheck || digits == "" {
		return false
	}
	r.Digits = append(r.Digits, Digits{Step: stepID, Type: stepType, Digits: digits, At: at})
	return true
}

// SetAnswer marks the call answered at t by extension (which may be empty,
// e.g. for an outbound call answered by the carrier).
func (r *Record) SetAnswer(t time.Time, by string) {
	t = t.UTC()
	r.Answer = &t
	r.AnsweredBy = by
}

// Answered reports whether the call was answered.
func (r *Record) Answered() bool { return r.Answer != nil }

// Finish sets the end, the cause and the final SIP status and reason.
func (r *Record) Finish(end time.Time, cause calls.Cause, sipStatus int, reason string) {
	r.End = end
	r.Cause = cause
	r.SIPStatus = sipStatus
	r.Reason = reason
}

// normalize brings the record to its stored form: times in UTC at
// millisecond precision, v set, durations derived, nil lists empty, digits of
// voicemail_check steps removed (also when they were appended to Digits
// directly rather than through AddDigits). It leaves r unchanged and returns
// the normalized copy.
func (r *Record) normalize() Record {
	n := *r
	n.V = Version
	n.Start = msUTC(n.Start)
	n.End = msUTC(n.End)
	if n.Answer != nil {
		a := msUTC(*n.Answer)
		n.Answer = &a
	}
	n.Steps = append([]Step{}, n.Steps...)
	for i := range n.Steps {
		n.Steps[i].At = msUTC(n.Steps[i].At)
	}
	n.Legs = append([]Leg{}, n.Legs...)
	for i := range n.Legs {
		l := &n.Legs[i]
		l.Start, l.End = msUTC(l.Start), msUTC(l.End)
		if l.Answer != nil {
			a := msUTC(*l.Answer)
			l.Answer = &a
		}
	}
	n.Digits = filterDigits(n.Digits, n.Steps)
	n.DurationMS, n.BillMS = 0, 0
	if n.End.IsZero() { // an in-flight marker: the call has not ended
		return n
	}
	n.DurationMS = n.End.Sub(n.Start).Milliseconds()
	if n.Answer != nil && !n.End.Before(*n.Answer) {
		n.BillMS = n.End.Sub(*n.Answer).Milliseconds()
	}
	return n
}

// filterDigits drops the digits of voicemail_check steps, by the digits'
// own type and by the type of the step their id names.
func filterDigits(ds []Digits, steps []Step) []Digits {
	vm := map[string]bool{}
	for _, s := range steps {
		if s.Type == StepVoicemailCheck {
			vm[s.ID] = true
		}
	}
	out := make([]Digits, 0, len(ds))
	for _, d := range ds {
		if d.Type == StepVoicemailCheck || vm[d.Step] {
			continue
		}
		d.At = msUTC(d.At)
		out = append(out, d)
	}
	return out
}

// validate checks what must hold before a record is written. final is true
// for Commit (end and cause required), false for an in-flight marker.
func (r *Record) validate(final bool) error {
	if err := ValidateTenant(r.Tenant); err != nil {
		return err
	}
	if err := r.ID.Validate(); err != nil {
		return err
	}
	if !r.Direction.Valid() {
		return fmt.Errorf("%w: direction %q", ErrInvalid, r.Direction)
	}
	if r.Start.IsZero() {
		return fmt.Errorf("%w: start missing", ErrInvalid)
	}
	if !final {
		return nil
	}
	if !r.Cause.Valid() {
		return fmt.Errorf("%w: cause %q", ErrInvalid, r.Cause)
	}
	if r.End.IsZero() || r.End.Before(r.Start) {
		return fmt.Errorf("%w: end %v before start %v", ErrInvalid, r.End, r.Start)
	}
	if r.Answer != nil && (r.Answer.Before(r.Start) || r.End.Before(*r.Answer)) {
		return fmt.Errorf("%w: answer %v outside start..end", ErrInvalid, *r.Answer)
	}
	return nil
}

// Entry derives the record's index line.
func (r *Record) Entry() Entry {
	e := Entry{
		ID:         r.ID,
		Start:      msUTC(r.Start),
		Direction:  r.Direction,
		From:       r.From,
		To:         r.To,
		DID:        r.DID,
		Trunk:      r.Trunk,
		Extension:  r.Extension,
		Answered:   r.Answer != nil,
		Cause:      r.Cause,
		DurationMS: r.DurationMS,
		Rec:        r.Recording != "",
		VM:         r.Voicemail != "",
	}
	e.startMS = e.Start.UnixMilli()
	return e
}

func msUTC(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}
