package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"
	"time"
)

// writeToneWAV writes seconds of a sine at freq Hz: 8 kHz, mono, 16-bit PCM.
func writeToneWAV(t testing.TB, path string, freq float64, seconds int) {
	t.Helper()
	const rate = 8000
	n := rate * seconds
	var b bytes.Buffer
	le := binary.LittleEndian
	b.WriteString("RIFF")
	_ = binary.Write(&b, le, uint32(36+2*n))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(rate), uint32(2 * rate), uint16(2), uint16(16)} {
		_ = binary.Write(&b, le, v)
	}
	b.WriteString("data")
	_ = binary.Write(&b, le, uint32(2*n))
	for i := range n {
		_ = binary.Write(&b, le, int16(8000*math.Sin(2*math.Pi*freq*float64(i)/rate)))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// wavAudio is a mono 16-bit recording.
type wavAudio struct {
	rate    int
	samples []int16
}

// readWAV reads a 16-bit PCM WAV file (first channel). The data chunk runs
// to the end of the file whatever its header says: a recorder still writing
// has not patched the sizes yet. A file whose 44-byte header is still all
// zeros (linphone writes it when the recording ends) is read as the 8 kHz
// mono 16-bit audio of a G.711 call.
func readWAV(path string) (wavAudio, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return wavAudio{}, err
	}
	if len(b) >= 44 && bytes.Count(b[:44], []byte{0}) == 44 {
		w := wavAudio{rate: 8000}
		for i := 44; i+2 <= len(b); i += 2 {
			w.samples = append(w.samples, int16(binary.LittleEndian.Uint16(b[i:])))
		}
		return w, nil
	}
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return wavAudio{}, fmt.Errorf("%s: not a WAV file", path)
	}
	le := binary.LittleEndian
	var w wavAudio
	channels := 1
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(le.Uint32(b[off+4:]))
		body := b[off+8:]
		switch id {
		case "fmt ":
			if len(body) < 16 || le.Uint16(body[0:]) != 1 || le.Uint16(body[14:]) != 16 {
				return w, fmt.Errorf("%s: not 16-bit PCM", path)
			}
			channels, w.rate = int(le.Uint16(body[2:])), int(le.Uint32(body[4:]))
		case "data":
			if w.rate == 0 {
				return w, fmt.Errorf("%s: data before fmt", path)
			}
			frame := 2 * channels
			for i := 0; i+frame <= len(body); i += frame {
				w.samples = append(w.samples, int16(le.Uint16(body[i:])))
			}
			return w, nil
		}
		off += 8 + size + size%2
	}
	return w, fmt.Errorf("%s: no data chunk", path)
}

// seconds is the recording's length.
func (w wavAudio) seconds() float64 {
	if w.rate == 0 {
		return 0
	}
	return float64(len(w.samples)) / float64(w.rate)
}

// last returns the final d of the recording.
func (w wavAudio) last(d time.Duration) wavAudio {
	n := int(d.Seconds() * float64(w.rate))
	if n < len(w.samples) {
		w.samples = w.samples[len(w.samples)-n:]
	}
	return w
}

// toneShare is the share of the recording's energy at freq (Goertzel): about
// 0.5 for a clean sine at freq (the other half sits at -freq), near zero for
// silence or another tone.
func (w wavAudio) toneShare(freq float64) float64 {
	if len(w.samples) == 0 || w.rate == 0 {
		return 0
	}
	c := 2 * math.Cos(2*math.Pi*freq/float64(w.rate))
	var s1, s2, energy float64
	for _, x := range w.samples {
		v := float64(x)
		s1, s2 = v+c*s1-s2, s1
		energy += v * v
	}
	if energy == 0 {
		return 0
	}
	return (s1*s1 + s2*s2 - c*s1*s2) / float64(len(w.samples)) / energy
}

// TestToneShare checks the detector the softphone tests rely on.
func TestToneShare(t *testing.T) {
	path := t.TempDir() + "/t.wav"
	writeToneWAV(t, path, 1000, 1)
	w, err := readWAV(path)
	if err != nil {
		t.Fatal(err)
	}
	if w.rate != 8000 || len(w.samples) != 8000 {
		t.Fatalf("read %d samples at %d Hz", len(w.samples), w.rate)
	}
	if s := w.toneShare(1000); s < 0.45 {
		t.Errorf("share at 1000 Hz %.3f, want about 0.5", s)
	}
	if s := w.toneShare(600); s > 0.01 {
		t.Errorf("share at 600 Hz %.3f, want about 0", s)
	}
}
