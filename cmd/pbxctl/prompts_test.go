package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pbx/appliance/prompts"
	"pbx/rtpcore"
)

// speechServer speaks the provider's wire format: it checks each request
// and answers a 24 kHz mono 16-bit WAV of a 1 kHz tone (or status).
type speechServer struct {
	t      *testing.T
	status int
	mu     sync.Mutex
	inputs []string
	bodies []map[string]any
}

func (s *speechServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/audio/speech" {
		s.t.Errorf("request %s %s", r.Method, r.URL.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-env-key" {
		s.t.Errorf("authorization %q", got)
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.t.Errorf("request body: %v", err)
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.inputs = append(s.inputs, body["input"].(string))
	s.mu.Unlock()
	if s.status != 0 {
		w.WriteHeader(s.status)
		io.WriteString(w, `{"error":{"message":"quota exceeded for this key"}}`+strings.Repeat(" padding", 200))
		return
	}
	w.Header().Set("Content-Type", "audio/wav")
	w.Write(tone24k())
}

// tone24k is 0.5 s of a 1 kHz tone at 24 kHz with silence around it.
func tone24k() []byte {
	const rate = 24000
	pcm := make([]int16, rate)
	for i := rate / 4; i < 3*rate/4; i++ {
		pcm[i] = int16(16000 * math.Sin(2*math.Pi*1000*float64(i)/rate))
	}
	data := make([]byte, 2*len(pcm))
	for i, v := range pcm {
		binary.LittleEndian.PutUint16(data[2*i:], uint16(v))
	}
	h := make([]byte, 44)
	copy(h, "RIFF")
	binary.LittleEndian.PutUint32(h[4:], uint32(36+len(data)))
	copy(h[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(h[16:], 16)
	binary.LittleEndian.PutUint16(h[20:], 1)
	binary.LittleEndian.PutUint16(h[22:], 1)
	binary.LittleEndian.PutUint32(h[24:], rate)
	binary.LittleEndian.PutUint32(h[28:], rate*2)
	binary.LittleEndian.PutUint16(h[32:], 2)
	binary.LittleEndian.PutUint16(h[34:], 16)
	copy(h[36:], "data")
	binary.LittleEndian.PutUint32(h[40:], uint32(len(data)))
	return append(h, data...)
}

const ttsSystem = goodSystem + `  tts:
    provider: ttsprovider
    apiKey: sk-inline-key
    voice: alloy
    model: tts-1
`

func TestPromptsGenerateThroughProvider(t *testing.T) {
	srv := &speechServer{t: t}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := t.TempDir()
	write(t, cfg, "pbx.yaml", ttsSystem)
	out := filepath.Join(t.TempDir(), "prompts")
	t.Setenv("PBX_TTS_API_KEY", "sk-env-key") // wins over apiKey

	code, stdout, stderr := runCLI(t, "", "prompts", "generate", "--out", out, "--endpoint", hs.URL+"/", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("progress printed when not on a terminal: %q", stdout)
	}
	if len(srv.inputs) != len(prompts.Names())-1 { // the beep is a tone, not speech
		t.Errorf("%d speech requests for %d prompts", len(srv.inputs), len(prompts.Names()))
	}
	want := map[string]any{"model": "tts-1", "voice": "alloy", "response_format": "wav"}
	for k, v := range want {
		if srv.bodies[0][k] != v {
			t.Errorf("request %s = %v, want %v", k, srv.bodies[0][k], v)
		}
	}
	if !strings.Contains(strings.Join(srv.inputs, "|"), "Press 1 to listen to your messages.") {
		t.Errorf("the menu's text was not sent: %q", srv.inputs)
	}
	for _, name := range prompts.Names() {
		pcm, err := rtpcore.LoadWAV(filepath.Join(out, name+".wav")) // refuses anything but 8 kHz mono 16-bit
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == prompts.Beep {
			continue
		}
		// 0.5 s of tone, trimmed of its silence, still at 1 kHz.
		if d := float64(len(pcm)) / 8000; d < 0.49 || d > 0.53 {
			t.Errorf("%s lasts %.3f s", name, d)
		}
		if f := crossings(pcm[400:3600]) * 8000 / 3200 / 2; math.Abs(f-1000) > 10 {
			t.Errorf("%s: tone at %.0f Hz, want 1000", name, f)
		}
	}
}

func TestPromptsGenerateOptionalFieldsAndErrors(t *testing.T) {
	srv := &speechServer{t: t}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := t.TempDir()
	write(t, cfg, "pbx.yaml", goodSystem+"  tts: {provider: ttsprovider, apiKeyFile: key.txt}\n")
	write(t, cfg, "key.txt", "sk-file-key\n")
	out := t.TempDir()
	t.Setenv("PBX_TTS_API_KEY", "sk-env-key")

	// Without model and voice configured, neither is sent.
	srv.status = http.StatusTooManyRequests
	code, stdout, stderr := runCLI(t, "", "prompts", "generate", "--out", out, "--endpoint", hs.URL, "--config", cfg)
	if code != exitProblems {
		t.Errorf("provider error: exit %d", code)
	}
	if _, ok := srv.bodies[0]["model"]; ok {
		t.Errorf("model sent though not configured: %v", srv.bodies[0])
	}
	if _, ok := srv.bodies[0]["voice"]; ok {
		t.Errorf("voice sent though not configured: %v", srv.bodies[0])
	}
	if !strings.Contains(stderr, "429") || !strings.Contains(stderr, "quota exceeded") || len(stderr) > 600 {
		t.Errorf("error does not carry a bounded excerpt of the provider's answer: %q", stderr)
	}
	if strings.Contains(stdout+stderr, "sk-") {
		t.Errorf("a key was printed: %q %q", stdout, stderr)
	}

	code, _, stderr = runCLI(t, "", "prompts", "generate", "--out", out, "--config", cfg)
	if code != exitUsage || !strings.Contains(stderr, "--endpoint") {
		t.Errorf("missing endpoint: exit %d %q", code, stderr)
	}
	code, _, _ = runCLI(t, "", "prompts", "generate", "--out", out, "--engine", "espeak", "--lang", "fr")
	if code != exitUsage {
		t.Errorf("unknown language: exit %d", code)
	}
	code, _, _ = runCLI(t, "", "prompts", "generate", "--engine", "espeak")
	if code != exitUsage {
		t.Errorf("missing --out: exit %d", code)
	}
}

func TestPromptsGenerateKeyFromFile(t *testing.T) {
	var got string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer hs.Close()
	cfg := t.TempDir()
	write(t, cfg, "pbx.yaml", goodSystem+"  tts: {provider: ttsprovider, apiKey: sk-inline, apiKeyFile: key.txt}\n")
	write(t, cfg, "key.txt", "sk-file-key\n")
	t.Setenv("PBX_TTS_API_KEY", "")
	code, _, stderr := runCLI(t, "", "prompts", "generate", "--out", t.TempDir(), "--endpoint", hs.URL, "--config", cfg)
	if code != exitProblems || got != "Bearer sk-file-key" || !strings.Contains(stderr, "401") {
		t.Errorf("exit %d, authorization %q, %q", code, got, stderr)
	}
}

func TestPromptsGenerateWithEspeak(t *testing.T) {
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		t.Log("NOT RUN: espeak-ng is not installed (make test-deps installs it); this test proves nothing here")
		t.Skip("espeak-ng not installed")
	}
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "", "prompts", "generate", "--engine", "espeak", "--out", out)
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d: %q %q", code, stdout, stderr)
	}
	for _, name := range prompts.Names() {
		pcm, err := rtpcore.LoadWAV(filepath.Join(out, name+".wav"))
		if err != nil || len(pcm) < 800 {
			t.Errorf("%s: %d samples, %v", name, len(pcm), err)
		}
	}
}

func crossings(pcm []int16) float64 {
	n := 0
	for i := 1; i < len(pcm); i++ {
		if (pcm[i-1] < 0) != (pcm[i] < 0) {
			n++
		}
	}
	return float64(n)
}
