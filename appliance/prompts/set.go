package prompts

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"pbx/rtpcore"
)

//go:embed en/*.wav
var embedded embed.FS

// Set is a decoded prompt set: 8 kHz mono 16-bit samples by name. It is
// read-only once loaded and safe for concurrent use.
type Set struct {
	pcm map[string][]int16
}

// Get returns the samples of the named prompt, nil when there is none.
// The slice is shared: callers must not modify it.
func (s *Set) Get(name string) []int16 {
	if s == nil {
		return nil
	}
	return s.pcm[name]
}

// Embedded decodes the standard English set built into the binary.
func Embedded() (*Set, error) {
	s := &Set{pcm: map[string][]int16{}}
	ents, err := fs.ReadDir(embedded, "en")
	if err != nil {
		return nil, fmt.Errorf("embedded prompts: %w", err)
	}
	for _, e := range ents {
		b, err := embedded.ReadFile("en/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("embedded prompt %s: %w", e.Name(), err)
		}
		pcm, err := rtpcore.ReadWAV(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("embedded prompt %s: %w", e.Name(), err)
		}
		s.pcm[strings.TrimSuffix(e.Name(), ".wav")] = pcm
	}
	return s, nil
}

// Load is the embedded set overridden file by file from promptsDir: each
// `<name>.wav` there (8 kHz mono 16-bit PCM) replaces or adds the prompt
// of that name. A file that cannot be read or decoded is logged and the
// embedded prompt kept. An empty promptsDir means the embedded set alone;
// a promptsDir that cannot be listed is an error.
func Load(promptsDir string, log *slog.Logger) (*Set, error) {
	s, err := Embedded()
	if err != nil || promptsDir == "" {
		return s, err
	}
	ents, err := os.ReadDir(promptsDir)
	if err != nil {
		return nil, fmt.Errorf("prompts directory: %w", err)
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".wav")
		if !ok || name == "" || e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(promptsDir, e.Name())
		pcm, err := rtpcore.LoadWAV(path)
		if err == nil && len(pcm) == 0 {
			err = errors.New("no audio")
		}
		if err != nil {
			if log != nil {
				log.Warn("prompt override not usable: built-in prompt kept", "file", path, "err", err)
			}
			continue
		}
		s.pcm[name] = pcm
	}
	return s, nil
}
