package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Migration is the rewrite of one file.
type Migration struct {
	File   string // relative to the configuration root
	Before []byte
	After  []byte
	Notes  []string // what was changed, one line each
}

// Migrate finds the deprecated "livekit" key in System and Tenant documents and
// renames it to "roomservice". The rewrite is textual, at the key's position, so
// comments, key order, quoting, bare-string listeners and every other value (dataDir
// included) stay exactly as typed. A document holding both keys is left alone and
// reported in Notes; validation reports it as a problem.
func Migrate(root string) ([]Migration, error) {
	files, err := findDocuments(root)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, rel := range files {
		full := filepath.Join(root, filepath.FromSlash(rel))
		data, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", rel, err)
		}
		m, err := migrateFile(rel, data)
		if err != nil {
			return nil, err
		}
		if m != nil {
			out = append(out, *m)
		}
	}
	return out, nil
}

func migrateFile(rel string, data []byte) (*Migration, error) {
	lines := strings.SplitAfter(string(data), "\n")
	var notes []string
	changed := false
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: cannot migrate a file with a YAML syntax error: %w", rel, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		top := resolve(doc.Content[0])
		if top.Kind != yaml.MappingNode {
			continue
		}
		kind := scalarValue(mappingValue(top, "kind"))
		if kind != KindSystem && kind != KindTenant {
			continue
		}
		who := kind // named like a problem line: Tenant/acme
		if md := mappingValue(top, "metadata"); md != nil && md.Kind == yaml.MappingNode {
			if name := mappingValue(md, "name"); name != nil && scalarValue(name) != "" {
				who += "/" + scalarValue(name)
			}
		}
		spec := mappingValue(top, "spec")
		if spec == nil || spec.Kind != yaml.MappingNode {
			continue
		}
		key := mappingKey(spec, "livekit")
		if key == nil {
			continue
		}
		if mappingKey(spec, "roomservice") != nil {
			notes = append(notes, fmt.Sprintf("%s:%d: %s: livekit and roomservice are both set; not rewritten (remove one by hand)", rel, key.Line, who))
			continue
		}
		i := key.Line - 1
		if i < 0 || i >= len(lines) {
			continue
		}
		col := key.Column - 1
		ln := lines[i]
		at := strings.Index(ln[min(col, len(ln)):], "livekit")
		if at < 0 {
			continue
		}
		at += min(col, len(ln))
		lines[i] = ln[:at] + "roomservice" + ln[at+len("livekit"):]
		changed = true
		notes = append(notes, fmt.Sprintf("%s:%d: %s: livekit renamed to roomservice", rel, key.Line, who))
	}
	if !changed && len(notes) == 0 {
		return nil, nil
	}
	after := []byte(strings.Join(lines, ""))
	if !changed {
		after = data
	}
	return &Migration{File: rel, Before: data, After: after, Notes: notes}, nil
}

func mappingKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := resolve(m.Content[i]); k.Value == key {
			return k
		}
	}
	return nil
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := resolve(m.Content[i]); k.Value == key {
			return resolve(m.Content[i+1])
		}
	}
	return nil
}

// UnifiedDiff renders a migration as a unified diff with three lines of context.
func (m *Migration) UnifiedDiff() string {
	a := strings.SplitAfter(string(m.Before), "\n")
	b := strings.SplitAfter(string(m.After), "\n")
	if len(a) != len(b) || bytes.Equal(m.Before, m.After) {
		return ""
	}
	var changed []int
	for i := range a {
		if a[i] != b[i] {
			changed = append(changed, i)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- a/%s\n+++ b/%s\n", m.File, m.File)
	const ctx = 3
	for k := 0; k < len(changed); {
		start := max(0, changed[k]-ctx)
		end := changed[k]
		for k < len(changed) && changed[k] <= end+2*ctx {
			end = changed[k]
			k++
		}
		end = min(len(a)-1, end+ctx)
		if end == len(a)-1 && a[end] == "" {
			end--
		}
		n := end - start + 1
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", start+1, n, start+1, n)
		for i := start; i <= end; i++ {
			if a[i] == b[i] {
				out.WriteString(" " + withNL(a[i]))
				continue
			}
			out.WriteString("-" + withNL(a[i]))
			out.WriteString("+" + withNL(b[i]))
		}
	}
	return out.String()
}

func withNL(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n\\ No newline at end of file\n"
}
