package notice

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Notice is what the voicemail deposit hands over for one message.
type Notice struct {
	Tenant     string        `json:"tenant"`
	Extension  string        `json:"extension"`
	To         string        `json:"to"`        // the mailbox's email
	From       string        `json:"from"`      // the caller's number or URI user
	FromName   string        `json:"from_name"` // the caller's display name
	Duration   time.Duration `json:"duration"`
	ReceivedAt time.Time     `json:"received_at"`
	MessageID  string        `json:"message_id"` // the voicemail message's id
	WAV        string        `json:"wav"`        // local path of the recording
	// NoAttach is the mailbox's attach: false.
	NoAttach bool `json:"no_attach,omitempty"`
}

// Job states (see the package documentation).
const (
	StatePending = "pending"
	StateSending = "sending"
	StateSent    = "sent"
)

// Job is one notice as its file in notices/pending/ holds it.
type Job struct {
	ID            string    `json:"id"`
	State         string    `json:"state"`
	Notice        Notice    `json:"notice"`
	CreatedAt     time.Time `json:"created_at"`
	Attempts      int       `json:"attempts"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	LastError     string    `json:"last_error,omitempty"`
}

// decodeJob reads a job file's content; content that is not a whole job
// is an error (the file is then quarantined).
func decodeJob(b []byte) (*Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	switch j.State {
	case StatePending, StateSending, StateSent:
	default:
		return nil, fmt.Errorf("unknown state %q", j.State)
	}
	if j.ID == "" || j.Notice.To == "" || j.CreatedAt.IsZero() {
		return nil, errors.New("missing fields")
	}
	return &j, nil
}
