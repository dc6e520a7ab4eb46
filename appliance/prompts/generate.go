package prompts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Synth turns text into a WAV file's bytes (any rate and layout DecodeWAV reads).
type Synth interface {
	Synthesize(ctx context.Context, text string) ([]byte, error)
}

// Espeak synthesises with a local espeak-ng, fully offline.
type Espeak struct {
	Bin   string // default "espeak-ng"
	Voice string // espeak voice, default "en-us"
	Speed int    // words per minute, default 190
}

// Synthesize runs espeak-ng and returns the WAV it writes to stdout.
func (e Espeak) Synthesize(ctx context.Context, text string) ([]byte, error) {
	bin, voice, speed := e.Bin, e.Voice, e.Speed
	if bin == "" {
		bin = "espeak-ng"
	}
	if voice == "" {
		voice = "en-us"
	}
	if speed == 0 {
		speed = 190
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-v", voice, "-s", fmt.Sprint(speed), "--stdout", "--", text)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("espeak-ng: %w: %s", err, excerpt(stderr.Bytes()))
	}
	return out.Bytes(), nil
}

// Provider synthesises through an OpenAI-compatible speech endpoint
// (DESIGN 5.7): POST {Endpoint}/v1/audio/speech with a bearer key and
// JSON {model, voice, input, response_format: "wav"}, model and voice only
// when set.
type Provider struct {
	Endpoint     string
	Key          string // never logged nor put in an error
	Model, Voice string
	Client       *http.Client // default: one with a 2-minute timeout per prompt
}

// defaultClient bounds each speech request, so a provider that stalls
// ends the run with an error instead of hanging it.
var defaultClient = &http.Client{Timeout: 2 * time.Minute}

// maxSpeech bounds the audio a provider may return for one prompt.
const maxSpeech = 64 << 20

// Synthesize asks the provider for one prompt's speech.
func (p Provider) Synthesize(ctx context.Context, text string) ([]byte, error) {
	if p.Endpoint == "" {
		return nil, errors.New("the provider engine needs an endpoint (--endpoint)")
	}
	req := map[string]string{"input": text, "response_format": "wav"}
	if p.Model != "" {
		req["model"] = p.Model
	}
	if p.Voice != "" {
		req["voice"] = p.Voice
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	url := strings.TrimRight(p.Endpoint, "/") + "/v1/audio/speech"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("speech request: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "audio/wav")
	if p.Key != "" {
		hr.Header.Set("Authorization", "Bearer "+p.Key)
	}
	c := p.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("speech request: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxSpeech+1))
	if err != nil {
		return nil, fmt.Errorf("speech response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("speech provider answered %s: %s", resp.Status, excerpt(b))
	}
	if len(b) > maxSpeech {
		return nil, fmt.Errorf("speech response larger than %d bytes", maxSpeech)
	}
	return b, nil
}

// excerpt is a bounded, printable part of a body for an error message.
func excerpt(b []byte) string {
	const limit = 300
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, s)
}

// Generate writes every prompt of the standard set as `<name>.wav`
// (8 kHz mono 16-bit) into out, synthesising the spoken ones with s and
// the beep as a tone. progress, when not nil, is called after each file.
func Generate(ctx context.Context, s Synth, out string, progress func(done, total int, name string)) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("prompts: %w", err)
	}
	texts := Texts()
	names := Names()
	for i, name := range names {
		var pcm []int16
		if name == Beep {
			pcm = Tone()
		} else {
			wav, err := s.Synthesize(ctx, texts[name])
			if err != nil {
				return fmt.Errorf("prompt %s: %w", name, err)
			}
			x, rate, err := DecodeWAV(wav)
			if err != nil {
				return fmt.Errorf("prompt %s: %w", name, err)
			}
			if rate <= 0 {
				return fmt.Errorf("prompt %s: sample rate %d: %w", name, rate, ErrWAV)
			}
			if pcm = Condition(x, rate); len(pcm) == 0 {
				return fmt.Errorf("prompt %s: the synthesiser returned silence", name)
			}
		}
		if err := writeFile(filepath.Join(out, name+".wav"), EncodeWAV(pcm)); err != nil {
			return fmt.Errorf("prompt %s: %w", name, err)
		}
		if progress != nil {
			progress(i+1, len(names), name)
		}
	}
	return nil
}

// writeFile replaces path with b through a temporary file and a rename.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
