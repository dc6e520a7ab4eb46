package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"20s", 20 * time.Second},
		{"1m30s", 90 * time.Second},
		{"5m", 5 * time.Minute},
		{"1h", time.Hour},
		{"2160h", 90 * 24 * time.Hour},
		{"1h30m15s", time.Hour + 30*time.Minute + 15*time.Second},
		{"1.5h", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"10us", 10 * time.Microsecond},
		{"10µs", 10 * time.Microsecond},
		{"7ns", 7},
		{"0s", 0},
		{"-5s", -5 * time.Second},
		{"+5s", 5 * time.Second},
		{"-1m30s", -90 * time.Second},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if err != nil {
				t.Fatalf("ParseDuration(%q): %v", tc.in, err)
			}
			if got.D() != tc.want {
				t.Errorf("ParseDuration(%q) = %v, want %v", tc.in, got.D(), tc.want)
			}
		})
	}
}

func TestParseDurationRefuses(t *testing.T) {
	for _, tc := range []struct {
		in, msg string // msg: a part of the error the technician must see
	}{
		{"", "empty duration"},
		{"90", "a bare number is not a duration"},
		{"0", "a bare number is not a duration"},
		{"1m30", "a bare number is not a duration"},
		{"90d", `write hours (90 days is "2160h")`},
		{"2w", `no "w" unit`},
		{"1y", `no "y" unit`},
		{"5 m", `unknown unit " m"`},
		{"5min", `unknown unit "min"`},
		{"1H", `unknown unit "H"`},
		{"abc", `expected a number before "abc"`},
		{"m5", `expected a number before "m5"`},
		{"--5s", "more than one sign"},
		{"-", "has no number"},
		{"1..5s", `"1..5s"`},
		{".s", `".s"`},
		{"99999999999999h", `"99999999999999h"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := ParseDuration(tc.in)
			if err == nil {
				t.Fatalf("ParseDuration(%q) = %v, want an error", tc.in, d)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("ParseDuration(%q) error %q does not say %q", tc.in, err, tc.msg)
			}
		})
	}
}

// TestDurationString: durations print as a technician writes them, and read back.
func TestDurationString(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{5 * time.Minute, "5m"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{2160 * time.Hour, "2160h"},
		{-24 * time.Hour, "-24h"},
		{time.Hour + time.Second, "1h0m1s"},
		{1500 * time.Millisecond, "1.5s"},
		{250 * time.Millisecond, "250ms"},
	} {
		got := Duration(tc.d).String()
		if got != tc.want {
			t.Errorf("Duration(%v).String() = %q, want %q", tc.d, got, tc.want)
		}
		back, err := ParseDuration(got)
		if err != nil || back.D() != tc.d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back.D(), err, tc.d)
		}
	}
}

// TestDurationDecode covers durations as YAML values: numbers and other types are
// refused with the key's path.
func TestDurationDecode(t *testing.T) {
	for _, tc := range []struct {
		value string
		rule  string
		msg   string
	}{
		{"90", "decode.duration", `invalid duration: "90": a bare number is not a duration; add a unit (s, m, h)`},
		{"90d", "decode.duration", `invalid duration: "90d": there is no "d" unit; write hours (90 days is "2160h")`},
		{"[1m]", "decode.type", `expected a duration such as "30s" or "1m30s", found a list`},
		{"{m: 1}", "decode.type", `expected a duration such as "30s" or "1m30s", found a mapping`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			doc := "configVersion: pbx/v1\nkind: System\nspec:\n  cdr:\n    retention: " + tc.value + "\n"
			_, rep := LoadBytes(t.TempDir(), "system.yaml", []byte(doc), Options{Getenv: noEnv})
			if len(rep.Problems) != 1 {
				t.Fatalf("got %d problems, want 1: %v", len(rep.Problems), rep.Problems)
			}
			p := rep.Problems[0]
			if p.Rule != tc.rule || p.Path != "cdr.retention" || p.Line != 5 || p.Msg != tc.msg {
				t.Errorf("got %s (rule %s), want line 5, path cdr.retention, rule %s, message %q", p, p.Rule, tc.rule, tc.msg)
			}
		})
	}
	doc := "configVersion: pbx/v1\nkind: System\nspec:\n  cdr:\n    retention: 1m30s\n"
	cfg, rep := LoadBytes(t.TempDir(), "system.yaml", []byte(doc), Options{Getenv: noEnv})
	if !rep.OK() || cfg.System.CDR.Retention.D() != 90*time.Second {
		t.Errorf("retention 1m30s: got %v, problems %v", cfg.System.CDR.Retention, rep.Problems)
	}
	// An empty value (null) leaves the default, as it does for every scalar.
	doc = "configVersion: pbx/v1\nkind: System\nspec:\n  voicemail:\n    maxMessage:\n"
	cfg, rep = LoadBytes(t.TempDir(), "system.yaml", []byte(doc), Options{Getenv: noEnv})
	if !rep.OK() || cfg.System.Voicemail.MaxMessage.D() != DefaultMaxMessage {
		t.Errorf("maxMessage null: got %v, problems %v; want the default %v", cfg.System.Voicemail.MaxMessage, rep.Problems, DefaultMaxMessage)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"20s", "1m30s", "2160h", "-5s", "90", "90d", "1.5h", "", "--1s", "1e3s", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		// Whatever is accepted prints as a duration that reads back to the same value.
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v; its String %q reads back as %v, %v", s, d.D(), d.String(), back.D(), err)
		}
	})
}
