package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const secretValue = "hunter2-very-secret"

type holder struct {
	Name   string
	Secret Secret
	Ptr    *Secret
}

// TestSecretNeverPrints: no formatting path shows a secret's value.
func TestSecretNeverPrints(t *testing.T) {
	s := Secret(secretValue)
	h := holder{Name: "n", Secret: s, Ptr: &s}
	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%s", "%q", "%#v", "%+v", "%x", "%X", "%d", "%t", "%08.3f", "%10s", "%-20v", "%#q"} {
		outputs["fmt "+verb] = fmt.Sprintf(verb, s)
		outputs["fmt struct "+verb] = fmt.Sprintf(verb, h)
	}
	outputs["fmt pointer"] = fmt.Sprint(&s)
	outputs["fmt slice"] = fmt.Sprint([]Secret{s})
	outputs["fmt map"] = fmt.Sprintf("%#v", map[string]Secret{"k": s})
	outputs["Sprint"] = fmt.Sprint(s)
	outputs["Sprintln"] = fmt.Sprintln(s)
	outputs["String"] = s.String()
	outputs["error wrap"] = fmt.Errorf("login with %v: %w", s, fmt.Errorf("refused")).Error()

	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var b bytes.Buffer
		log := slog.New(h(&b))
		log.Info("starting", "secret", s, "holder", h, "ptr", &s, slog.Any("any", s), slog.Group("g", "secret", s))
		outputs["slog "+name] = b.String()
		if !strings.Contains(b.String(), "[redacted]") {
			t.Errorf("slog %s output does not show [redacted]: %s", name, b.String())
		}
	}

	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(j)
	if want := `"Secret":"[redacted]"`; !strings.Contains(string(j), want) {
		t.Errorf("JSON %s does not contain %s", j, want)
	}
	y, err := yaml.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	outputs["yaml"] = string(y)

	for name, out := range outputs {
		if strings.Contains(out, secretValue) || strings.Contains(out, fmt.Sprintf("%x", secretValue)) || strings.Contains(out, fmt.Sprintf("%X", secretValue)) {
			t.Errorf("%s shows the secret: %s", name, out)
		}
	}
	for _, verb := range []string{"%v", "%s", "%#v"} {
		if got := fmt.Sprintf(verb, s); got != "[redacted]" {
			t.Errorf("Sprintf(%q) = %q, want [redacted]", verb, got)
		}
	}
	if s.Reveal() != secretValue {
		t.Errorf("Reveal() = %q, want the value", s.Reveal())
	}
}

// TestSecretEmpty: an unset secret prints as empty, so "[redacted]" always means
// that a value is configured.
func TestSecretEmpty(t *testing.T) {
	var s Secret
	if got := fmt.Sprintf("%v|%s|%#v", s, s, s); got != "||" {
		t.Errorf("empty secret prints %q, want empty", got)
	}
	j, _ := json.Marshal(s)
	if string(j) != `""` {
		t.Errorf("empty secret JSON = %s, want \"\"", j)
	}
}

// TestSecretsInLoadedConfig: the secrets of a real configuration are redacted when
// the typed configuration is printed with fmt or logged.
func TestSecretsInLoadedConfig(t *testing.T) {
	cfg, rep := loadDir(t, "testdata/good/full")
	if !rep.OK() {
		t.Fatalf("full: %v", rep.Err())
	}
	var b bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("config", "smtp", cfg.System.SMTP, "roomservice", cfg.System.RoomService, "tokens", cfg.System.API.Tokens, "tts", cfg.System.TTS)
	text := b.String() + fmt.Sprintf("%+v %#v %v", *cfg.System.SMTP, *cfg.System.RoomService, cfg.System.API.Tokens)
	for _, a := range cfg.Accounts {
		text += fmt.Sprintf("%+v", *a)
	}
	for _, plain := range fullSecrets {
		if strings.Contains(text, plain) {
			t.Errorf("the output shows the secret %q", plain)
		}
	}
}

// fullSecrets are the secret values written in testdata/good/full.
var fullSecrets = []string{
	"carrier-password", "example-secret-access-key", "example-session-token", "smtp-password",
	"inline-tts-key", "tts-key-from-file", "acme-dashboard-token-0123456789abcdef", "bridge-password",
	"rs-secret-from-file", "acme-inline-secret", "acme-bridge-password", "alice-sip-password",
	"bob-sip-password", "carol-sip-password", "hank-sip-password", "globex-webhook-secret", "whsec-from-file",
	"initech-secret-access-key", "initech-session-token", "initech-smtp-password", "peter-sip-password",
}
