package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Duration is a configuration duration: number-plus-unit pairs such as "20s",
// "1m30s" or "2160h". A bare number and a day unit are invalid.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration the way ParseDuration reads it back, without the
// zero units time.Duration adds: "5m", "1h30m", "-24h" rather than "5m0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ParseDuration reads a configuration duration. It accepts an optional sign and one
// or more number-plus-unit pairs with units ns, us, µs, ms, s, m and h.
func ParseDuration(s string) (Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration")
	}
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, fmt.Errorf("%q has more than one sign", s)
	}
	if body == "" {
		return 0, fmt.Errorf("%q has no number", s)
	}
	// Walk the pairs so that a bare number or an unknown unit gets a precise message.
	for rest := body; rest != ""; {
		n := 0
		for n < len(rest) && (rest[n] >= '0' && rest[n] <= '9' || rest[n] == '.') {
			n++
		}
		if n == 0 {
			return 0, fmt.Errorf("%q: expected a number before %q", s, rest)
		}
		rest = rest[n:]
		u := 0
		for u < len(rest) && !(rest[u] >= '0' && rest[u] <= '9' || rest[u] == '.') {
			u++
		}
		unit := rest[:u]
		rest = rest[u:]
		switch unit {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		case "":
			return 0, fmt.Errorf("%q: a bare number is not a duration; add a unit (s, m, h)", s)
		case "d", "w", "y":
			return 0, fmt.Errorf("%q: there is no %q unit; write hours (90 days is \"2160h\")", s, unit)
		default:
			return 0, fmt.Errorf("%q: unknown unit %q (use ns, us, ms, s, m or h)", s, unit)
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, errors.Unwrap(err))
	}
	return Duration(d), nil
}

// Secret is a configured secret. It never prints its value: fmt and slog show
// "[redacted]" for a non-empty secret.
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// String hides the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// Format hides the value from every fmt verb. Without it a verb meant for another
// type (%d, %t) prints "%!d(config.Secret=<the value>)".
func (s Secret) Format(f fmt.State, verb rune) {
	if verb != 'q' {
		verb = 's'
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), s.String())
}

// GoString hides the value from %#v too.
func (s Secret) GoString() string { return s.String() }

// LogValue hides the value from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalYAML hides the value from a printed configuration.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON hides the value from JSON output.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }
