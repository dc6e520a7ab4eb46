package config

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Problem is one thing wrong in the configuration documents.
type Problem struct {
	File string `json:"file"` // relative to the configuration root
	Line int    `json:"line"`
	Kind string `json:"kind"` // "System", "Trunk", ...
	Name string `json:"name"` // metadata.name (tenant/name for tenant-owned kinds); empty for System
	Path string `json:"path"` // "roomservice.sipTransport"
	Msg  string `json:"message"`

	// Rule identifies the check that found the problem.
	Rule string `json:"-"`
}

// String formats the problem as FILE:LINE: KIND/NAME: path: message, on one line:
// control characters from the documents (a kind or key with a line break in it)
// are escaped, so one problem is always one line and nothing reaches the terminal raw.
func (p Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", oneLine(p.File), p.Line)
	if p.Kind != "" {
		b.WriteString(oneLine(p.Kind))
		if p.Name != "" {
			b.WriteString("/" + oneLine(p.Name))
		}
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(oneLine(p.Path) + ": ")
	}
	b.WriteString(oneLine(p.Msg))
	return b.String()
}

// oneLine escapes control characters other than tab as \n, \r or \xNN.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case isControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 }

// Report holds the problems and warnings of one load.
type Report struct {
	Problems []Problem `json:"problems"`
	Warnings []Problem `json:"warnings"`
}

// OK reports whether the configuration has no problems (warnings do not count).
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Err returns nil when there are no problems, else an error listing them.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	lines := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		lines[i] = p.String()
	}
	return fmt.Errorf("configuration has %d problem(s):\n%s", len(r.Problems), strings.Join(lines, "\n"))
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Msg < b.Msg
	})
}

func (r *Report) sort() {
	sortProblems(r.Problems)
	sortProblems(r.Warnings)
	if r.Problems == nil {
		r.Problems = []Problem{}
	}
	if r.Warnings == nil {
		r.Warnings = []Problem{}
	}
}

// WriteText writes one line per problem, then one "warning: " line per warning.
func (r *Report) WriteText(w io.Writer) error {
	for _, p := range r.Problems {
		if _, err := fmt.Fprintln(w, p.String()); err != nil {
			return err
		}
	}
	for _, p := range r.Warnings {
		if _, err := fmt.Fprintln(w, "warning: "+p.String()); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes {"problems":[...],"warnings":[...]}.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
