package notice

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"pbx/appliance/datadir"
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

// writeJob writes j to path atomically (datadir.WriteFile).
func writeJob(path string, j *Job) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("notice job %s: %w", j.ID, err)
	}
	if err := datadir.WriteFile(path, append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("notice job %s: %w", j.ID, err)
	}
	return nil
}

// readJob reads the job file at path; a file that is not a job is an
// error (the caller quarantines it).
func readJob(path string) (*Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("job file %s: %w", filepath.Base(path), err)
	}
	switch j.State {
	case StatePending, StateSending, StateSent:
	default:
		return nil, fmt.Errorf("job file %s: unknown state %q", filepath.Base(path), j.State)
	}
	if j.ID == "" || j.Notice.To == "" || j.CreatedAt.IsZero() {
		return nil, fmt.Errorf("job file %s: missing fields", filepath.Base(path))
	}
	return &j, nil
}
