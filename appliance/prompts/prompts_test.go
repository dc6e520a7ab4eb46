package prompts

import (
	"bytes"
	"context"
	"encoding/binary"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pbx/rtpcore"
)

// required is the fixed list of prompt names (DESIGN 5.7 and the words to
// read numbers, dates and times), written out here independently of Names.
func required() []string {
	names := strings.Fields(`vm-greeting vm-beep vm-full vm-enter-pin vm-wrong-pin vm-enter-mailbox vm-you-have vm-new vm-saved
vm-messages vm-no-messages vm-menu vm-deleted vm-saved-ok vm-goodbye vm-record-greeting
vm-message-options vm-greeting-erased vm-help vm-message vm-from vm-received vm-invalid
20 30 40 50 60 70 80 90 hundred oh am pm at today yesterday
monday tuesday wednesday thursday friday saturday sunday
january february march april may june july august september october november december`)
	for i := range 20 {
		names = append(names, strconv.Itoa(i))
	}
	return names
}

func TestEmbeddedSetHasEveryPromptAs8kHzWAV(t *testing.T) {
	s, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range required() {
		b, err := embedded.ReadFile("en/" + name + ".wav")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// The header says 8 kHz, mono, 16-bit PCM (rtpcore.ReadWAV refuses anything else).
		if _, err := rtpcore.ReadWAV(bytes.NewReader(b)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		pcm := s.Get(name)
		if d := float64(len(pcm)) / Rate; d < 0.15 || d > 8 {
			t.Errorf("%s lasts %.2f s", name, d)
		}
		if peak(pcm) < 8000 {
			t.Errorf("%s is nearly silent (peak %d)", name, peak(pcm))
		}
	}
	if s.Get("no-such-prompt") != nil {
		t.Error("an unknown prompt is not nil")
	}
	// The generator's list and the embedded files agree.
	ents, _ := fs.ReadDir(embedded, "en")
	if len(ents) != len(Names()) {
		t.Errorf("%d embedded files, %d names", len(ents), len(Names()))
	}
}

func TestEmbeddedSetSizeBudget(t *testing.T) {
	var total int64
	ents, err := fs.ReadDir(embedded, "en")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	t.Logf("embedded prompts: %d files, %d bytes", len(ents), total)
	if total >= 1_000_000 {
		t.Errorf("embedded prompts take %d bytes, over the 1 MB budget", total)
	}
}

func TestLoadOverridesFileByFile(t *testing.T) {
	dir := t.TempDir()
	custom := Tone()[:800]
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("vm-goodbye.wav", EncodeWAV(custom))
	write("vm-extra.wav", EncodeWAV(custom[:160]))
	write("vm-menu.wav", []byte("not a wav at all"))
	write("vm-greeting.wav", makeWAV(16000, 1, 16, 1, [][]float64{sine(16000, 440, 0.5, 0.5)}))
	write("notes.txt", []byte("ignored"))
	var logs bytes.Buffer
	s, err := Load(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := Embedded()
	if got := s.Get("vm-goodbye"); !equal(got, custom) {
		t.Errorf("override not used: %d samples", len(got))
	}
	if got := s.Get("vm-extra"); len(got) != 160 {
		t.Errorf("added prompt has %d samples", len(got))
	}
	for _, name := range []string{"vm-menu", "vm-greeting", "vm-beep"} {
		if !equal(s.Get(name), base.Get(name)) {
			t.Errorf("%s: the embedded prompt was not kept", name)
		}
	}
	for _, want := range []string{"vm-menu.wav", "vm-greeting.wav"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line for %s:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "vm-goodbye") {
		t.Errorf("a good override was logged:\n%s", logs.String())
	}
	if _, err := Load(filepath.Join(dir, "missing"), nil); err == nil {
		t.Error("a missing promptsDir is not an error")
	}
	if s, err := Load("", nil); err != nil || !equal(s.Get("vm-goodbye"), base.Get("vm-goodbye")) {
		t.Errorf("empty promptsDir: %v", err)
	}
}

func TestResampleKeepsFrequencyAndFiltersAliases(t *testing.T) {
	for _, in := range []int{24000, 22050, 44100, 16000, 6000} {
		y := Resample(sine(in, 1000, 0.8, 1), in, Rate)
		if n := len(y); n < Rate-2 || n > Rate+2 {
			t.Errorf("%d Hz: %d output samples for 1 s", in, n)
		}
		if f := frequency(y[800:7200], Rate); math.Abs(f-1000) > 5 {
			t.Errorf("%d Hz: 1 kHz tone came out at %.1f Hz", in, f)
		}
		if a := rms(y[800:7200]); math.Abs(a-0.8/math.Sqrt2) > 0.02 {
			t.Errorf("%d Hz: 1 kHz tone level %.3f, want %.3f", in, a, 0.8/math.Sqrt2)
		}
	}
	// 5 kHz at 24 kHz is above the 8 kHz Nyquist: dropping samples would
	// fold it to 3 kHz at full level; the low-pass removes it.
	y := Resample(sine(24000, 5000, 0.8, 1), 24000, Rate)
	if a := rms(y[800:7200]); a > 0.01 {
		t.Errorf("5 kHz tone leaks through at rms %.4f", a)
	}
}

func TestDecodeWAVFormats(t *testing.T) {
	left, right := sine(48000, 1000, 0.5, 0.1), sine(48000, 1000, 0.5, 0.1)
	for _, c := range []struct {
		bits, format int
	}{{16, 1}, {24, 1}, {32, 1}, {32, 3}, {64, 3}, {8, 1}} {
		x, rate, err := DecodeWAV(makeWAV(48000, 2, c.bits, c.format, [][]float64{left, right}))
		if err != nil || rate != 48000 || len(x) != len(left) {
			t.Errorf("%d-bit format %d: rate %d, %d samples, %v", c.bits, c.format, rate, len(x), err)
			continue
		}
		tol := 1e-4
		if c.bits == 8 {
			tol = 1.0 / 64
		}
		for i := range x {
			if math.Abs(x[i]-left[i]) > tol {
				t.Errorf("%d-bit format %d: sample %d = %f, want %f", c.bits, c.format, i, x[i], left[i])
				break
			}
		}
	}
	// A streamed answer whose header carries no data length.
	for _, size := range []uint32{0, 0xFFFFFFFF} {
		w := makeWAV(24000, 1, 16, 1, [][]float64{left})
		binary.LittleEndian.PutUint32(w[40:], size)
		if x, _, err := DecodeWAV(w); err != nil || len(x) != len(left) {
			t.Errorf("data length %#x: %d samples, %v", size, len(x), err)
		}
	}
	if _, _, err := DecodeWAV([]byte("RIFF....WAVEjunk")); err == nil {
		t.Error("garbage decoded")
	}
}

func TestConditionTrimsSilence(t *testing.T) {
	x := append(make([]float64, 24000), sine(24000, 500, 0.3, 0.5)...)
	x = append(x, make([]float64, 48000)...)
	pcm := Condition(x, 24000)
	if d := float64(len(pcm)) / Rate; d < 0.5 || d > 0.53 {
		t.Errorf("conditioned prompt lasts %.3f s, want the 0.5 s tone and 10 ms margins", d)
	}
	if p := peak(pcm); p < 23000 || p > 23300 {
		t.Errorf("peak %d, want -3 dBFS", p)
	}
}

// TestGenerateWithEspeak rebuilds the whole set with the local espeak-ng.
func TestGenerateWithEspeak(t *testing.T) {
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		t.Log("NOT RUN: espeak-ng is not installed (make test-deps installs it); this test proves nothing here")
		t.Skip("espeak-ng not installed")
	}
	out := t.TempDir()
	var seen int
	if err := Generate(context.Background(), Espeak{}, out, func(done, total int, name string) { seen = done }); err != nil {
		t.Fatal(err)
	}
	if seen != len(Names()) {
		t.Errorf("progress reached %d of %d", seen, len(Names()))
	}
	for _, name := range required() {
		pcm, err := rtpcore.LoadWAV(filepath.Join(out, name+".wav"))
		if err != nil || len(pcm) < Rate/10 {
			t.Errorf("%s: %d samples, %v", name, len(pcm), err)
		}
	}
}

func sine(rate int, f, amp, secs float64) []float64 {
	x := make([]float64, int(float64(rate)*secs))
	for i := range x {
		x[i] = amp * math.Sin(2*math.Pi*f*float64(i)/float64(rate))
	}
	return x
}

// makeWAV encodes channels of floats as a WAV of the given layout.
func makeWAV(rate, channels, bits, format int, ch [][]float64) []byte {
	width := bits / 8
	n := len(ch[0])
	data := make([]byte, n*channels*width)
	for i := range n {
		for c := range channels {
			p := data[(i*channels+c)*width:]
			v := ch[c][i]
			switch {
			case format == 3 && bits == 32:
				binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
			case format == 3 && bits == 64:
				binary.LittleEndian.PutUint64(p, math.Float64bits(v))
			case bits == 8:
				p[0] = byte(int(math.Round(v*127)) + 128)
			default:
				iv := int64(math.Round(v * float64(int64(1)<<(bits-1)-1)))
				for b := range width {
					p[b] = byte(iv >> (8 * b))
				}
			}
		}
	}
	h := make([]byte, 44)
	copy(h, "RIFF")
	binary.LittleEndian.PutUint32(h[4:], uint32(36+len(data)))
	copy(h[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(h[16:], 16)
	binary.LittleEndian.PutUint16(h[20:], uint16(format))
	binary.LittleEndian.PutUint16(h[22:], uint16(channels))
	binary.LittleEndian.PutUint32(h[24:], uint32(rate))
	binary.LittleEndian.PutUint32(h[28:], uint32(rate*channels*width))
	binary.LittleEndian.PutUint16(h[32:], uint16(channels*width))
	binary.LittleEndian.PutUint16(h[34:], uint16(bits))
	copy(h[36:], "data")
	binary.LittleEndian.PutUint32(h[40:], uint32(len(data)))
	return append(h, data...)
}

// frequency estimates a tone's frequency from its zero crossings.
func frequency(x []float64, rate int) float64 {
	first, last, n := -1, -1, 0
	for i := 1; i < len(x); i++ {
		if x[i-1] < 0 && x[i] >= 0 {
			if first < 0 {
				first = i
			}
			last = i
			n++
		}
	}
	if n < 2 {
		return 0
	}
	return float64(n-1) * float64(rate) / float64(last-first)
}

func rms(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s / float64(len(x)))
}

func peak(pcm []int16) int {
	p := 0
	for _, v := range pcm {
		p = max(p, int(math.Abs(float64(v))))
	}
	return p
}

func equal(a, b []int16) bool {
	return len(a) == len(b) && (len(a) == 0 || bytes.Equal(EncodeWAV(a), EncodeWAV(b)))
}
