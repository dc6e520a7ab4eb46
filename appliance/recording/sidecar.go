package recording

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"pbx/appliance/datadir"
	"pbx/rtpcore"
	"pbx/sipcore/calls"
)

// Format says what the audio is (DESIGN 5.6).
type Format struct {
	Container   string `json:"container"`    // wav
	Codec       string `json:"codec"`        // pcm_s16le
	SourceCodec string `json:"source_codec"` // pcmu or pcma: what the call carried
	SampleRate  int    `json:"sample_rate"`
	Channels    int    `json:"channels"`
	Layout      string `json:"layout"` // caller-left,far-right
}

// formatFor is the format of a recording of a call whose first negotiated
// payload type is pt.
func formatFor(pt uint8, rate int) Format {
	src := "pcma"
	if pt == rtpcore.PayloadPCMU {
		src = "pcmu"
	}
	return Format{Container: "wav", Codec: "pcm_s16le", SourceCodec: src, SampleRate: rate, Channels: 2, Layout: "caller-left,far-right"}
}

// Sidecar is the metadata written beside a recording's WAV: every field of
// the specification's table, plus incomplete. Start and End are the
// call's; DurationMS is the audio's length. Its presence means the WAV is
// whole.
type Sidecar struct {
	ID         string          `json:"id"`
	Tenant     string          `json:"tenant"`
	CallID     string          `json:"call_id"`
	Direction  calls.Direction `json:"direction"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	DID        string          `json:"did"`
	Trunk      string          `json:"trunk"`
	AnsweredBy string          `json:"answered_by"`
	Start      time.Time       `json:"start"`
	End        time.Time       `json:"end"`
	DurationMS int64           `json:"duration_ms"`
	Format     Format          `json:"format"`
	Bytes      int64           `json:"bytes"`
	SHA256     string          `json:"sha256"`
	CDR        string          `json:"cdr"` // always empty (the specification)
	Incomplete bool            `json:"incomplete"`
}

// Extensions of the two files of a recording.
const (
	audioExt   = ".wav"
	sidecarExt = ".json"
)

// writeSidecar writes sc as JSON to path, atomically.
func writeSidecar(path string, sc *Sidecar) error {
	b, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	return datadir.WriteFile(path, append(b, '\n'), 0o640)
}

// readSidecar reads the sidecar at path.
func readSidecar(path string) (*Sidecar, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sc Sidecar
	if err := json.Unmarshal(b, &sc); err != nil {
		return nil, fmt.Errorf("sidecar %s: %w", filepath.Base(path), err)
	}
	return &sc, nil
}

// digest fills sc's bytes, sha256 and duration from the finished WAV at
// path (a canonical 44-byte header, then stereo 16-bit frames).
func digest(path string, sc *Sidecar) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	sc.Bytes, sc.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	if rate := int64(sc.Format.SampleRate); rate > 0 && n > wavHeaderLen {
		frames := (n - wavHeaderLen) / int64(2*max(sc.Format.Channels, 1))
		sc.DurationMS = frames * 1000 / rate
	}
	return nil
}

// wavHeaderLen is the canonical PCM header rtpcore.WAVWriter writes.
const wavHeaderLen = 44
