package upload

import (
	"encoding/json"
	"errors"
	"time"
)

// Keys are the object keys of a recording's audio and sidecar.
type Keys struct {
	Audio string `json:"audio"`
	Meta  string `json:"meta"`
}

// Uploaded says which objects the store confirmed.
type Uploaded struct {
	Audio bool `json:"audio"`
	Meta  bool `json:"meta"`
}

// Job is one recording's upload, as its job file holds it (DESIGN 5.6).
type Job struct {
	ID            string    `json:"id"`
	Tenant        string    `json:"tenant"`
	Audio         string    `json:"audio"`   // local path of the WAV
	Sidecar       string    `json:"sidecar"` // local path of the sidecar
	Keys          Keys      `json:"keys"`
	CreatedAt     time.Time `json:"created_at"`
	Attempts      int       `json:"attempts"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	LastError     string    `json:"last_error"`
	Uploaded      Uploaded  `json:"uploaded"`
}

// decodeJob reads a job file's content; content that is not a whole job
// is an error (the file is then quarantined).
func decodeJob(b []byte) (*Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	if j.ID == "" || j.Audio == "" || j.Sidecar == "" || j.Keys.Audio == "" || j.Keys.Meta == "" || j.CreatedAt.IsZero() {
		return nil, errors.New("missing fields")
	}
	return &j, nil
}
