package upload

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"pbx/appliance/datadir"
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

// writeJob writes j to path atomically (datadir.WriteFile).
func writeJob(path string, j *Job) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("upload job %s: %w", j.ID, err)
	}
	if err := datadir.WriteFile(path, append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("upload job %s: %w", j.ID, err)
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
	if j.ID == "" || j.Audio == "" || j.Sidecar == "" || j.Keys.Audio == "" || j.Keys.Meta == "" || j.CreatedAt.IsZero() {
		return nil, fmt.Errorf("job file %s: missing fields", filepath.Base(path))
	}
	return &j, nil
}
