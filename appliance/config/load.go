package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Options adjust a load.
type Options struct {
	// Getenv reads the environment (secrets such as PBX_ROOMSERVICE_API_SECRET);
	// nil means os.Getenv.
	Getenv func(string) string
}

// ErrNotDirectory is returned when the configuration root is not a readable directory.
var ErrNotDirectory = errors.New("configuration root is not a directory")

// Load reads every *.yaml and *.yml document under root, recursively, fills
// defaults and validates the whole tree. The error is non-nil only when root itself
// cannot be read; problems in the documents are in the report, all of them.
func Load(root string, opts Options) (*Config, *Report, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	st, err := os.Stat(root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotDirectory, err)
	}
	if !st.IsDir() {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotDirectory, root)
	}
	files, err := findDocuments(root)
	if err != nil {
		return nil, nil, err
	}
	l := newLoader(root, opts)
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			l.nothing = false
			l.rep.Problems = append(l.rep.Problems, Problem{File: rel, Line: 1, Msg: fmt.Sprintf("cannot read: %v", cleanErr(err)), Rule: "file.read"})
			continue
		}
		l.file(rel, data)
	}
	return l.finish()
}

// LoadBytes loads documents held in memory, as if they were one file named name
// under root (relative paths in them resolve against root).
func LoadBytes(root, name string, data []byte, opts Options) (*Config, *Report) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	l := newLoader(root, opts)
	l.file(name, data)
	cfg, rep, _ := l.finish()
	return cfg, rep
}

func findDocuments(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != root && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if ext := filepath.Ext(name); ext == ".yaml" || ext == ".yml" {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read configuration root: %w", err)
	}
	sort.Strings(files)
	return files, nil
}

type loader struct {
	root    string
	opts    Options
	cfg     *Config
	rep     *Report
	system  *Meta // first System document seen
	nothing bool  // no document at all
}

func newLoader(root string, opts Options) *loader {
	cfg := &Config{Root: root}
	cfg.System.setDefaults()
	cfg.System.Meta = Meta{Kind: KindSystem, lines: map[string]int{}}
	return &loader{root: root, opts: opts, cfg: cfg, rep: &Report{}, nothing: true}
}

func (l *loader) add(m *Meta, path, rule, msg string) {
	l.rep.Problems = append(l.rep.Problems, problemAt(m, path, rule, msg))
}

func (l *loader) warn(m *Meta, path, rule, msg string) {
	l.rep.Warnings = append(l.rep.Warnings, problemAt(m, path, rule, msg))
}

func problemAt(m *Meta, path, rule, msg string) Problem {
	return Problem{File: m.File, Line: m.LineOf(path), Kind: m.Kind, Name: m.displayName(), Path: path, Msg: msg, Rule: rule}
}

func (m *Meta) displayName() string {
	switch m.Kind {
	case KindAccount, KindInboundRoute, KindWebhook, KindOutboundRoute:
		if m.Tenant != "" && m.Name != "" {
			return m.Tenant + "/" + m.Name
		}
	}
	return m.Name
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

func (l *loader) file(rel string, data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			l.nothing = false
			line := 1
			if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
				line, _ = strconv.Atoi(m[1])
			}
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			msg = yamlLineRE.ReplaceAllString(msg, "")
			msg = strings.TrimLeft(msg, ": ")
			l.rep.Problems = append(l.rep.Problems, Problem{File: rel, Line: line, Msg: "YAML syntax: " + msg + " (the rest of this file is not read)", Rule: "file.syntax"})
			return
		}
		if len(doc.Content) == 0 || isEmptyDocument(doc.Content[0]) {
			continue // empty document between separators, or one holding only comments
		}
		l.document(rel, resolve(doc.Content[0]))
	}
}

// isEmptyDocument reports whether a document's content is nothing at all (as
// opposed to an explicit null, ~ or any value).
func isEmptyDocument(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "" && n.Anchor == ""
}

// document decodes one document: header keys, then the kind's spec.
func (l *loader) document(rel string, n *yaml.Node) {
	l.nothing = false
	meta := &Meta{File: rel, Line: n.Line, lines: map[string]int{}}
	if n.Kind != yaml.MappingNode {
		l.add(meta, "", "doc.shape", fmt.Sprintf("a document must be a mapping with configVersion, kind, metadata and spec; found %s", describe(n)))
		return
	}
	if plain, expanded := nodeCounts(n); expanded-plain > maxAliasNodes {
		l.add(meta, "", "doc.aliases", fmt.Sprintf("YAML aliases expand this document by %d values, more than the %d allowed; write the values out instead", expanded-plain, maxAliasNodes))
		return
	}
	var version, kind string
	var metaNode, spec *yaml.Node
	hdr := []string{"configVersion", "kind", "metadata", "spec"}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		meta.lines[k.Value] = k.Line
		if seen[k.Value] {
			l.add(meta, k.Value, "decode.duplicateKey", fmt.Sprintf("key %q appears twice", k.Value))
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "configVersion":
			version = scalarValue(v)
		case "kind":
			kind = scalarValue(v)
		case "metadata":
			metaNode = v
		case "spec":
			spec = v
		default:
			l.add(meta, k.Value, "decode.unknownKey", fmt.Sprintf("unknown key %q%s", k.Value, suggest(k.Value, hdr)))
		}
	}
	meta.Kind = kind
	l.readMetadata(meta, metaNode)

	switch {
	case !seen["configVersion"]:
		l.add(meta, "", "doc.configVersion", fmt.Sprintf("configVersion is missing; write configVersion: %s", Version))
	case version != Version:
		l.add(meta, "configVersion", "doc.configVersion", fmt.Sprintf("unsupported configVersion %q; this version of pbx reads %s", version, Version))
	}
	target := l.newDocument(meta)
	if !target.IsValid() {
		if kind == "" {
			l.add(meta, "", "doc.kind", "kind is missing; write one of "+strings.Join(allKinds, ", "))
		} else {
			l.add(meta, "kind", "doc.kind", fmt.Sprintf("unknown kind %q%s", kind, suggest(kind, allKinds)))
		}
		return
	}
	l.checkMetadata(meta, metaNode != nil)
	if spec == nil {
		if kind != KindSystem {
			l.add(meta, "", "doc.spec", "spec is missing")
		}
		return
	}
	d := &decoder{meta: meta, add: l.add}
	d.decode(spec, target.Elem(), "")
}

// maxAliasNodes bounds how many values YAML aliases may add to one document. A few
// lines of anchors and aliases can otherwise expand to millions of values, and as
// many problems, which would hang validation.
const maxAliasNodes = 100_000

// nodeCounts counts the nodes of a document as written and with every alias
// expanded. An alias to a value that contains it counts once; counts saturate.
func nodeCounts(root *yaml.Node) (plain, expanded int) {
	const ceiling = 1 << 40
	memo := map[*yaml.Node]int{}
	var walk func(n *yaml.Node) int
	walk = func(n *yaml.Node) int {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return 1
			}
			return walk(n.Alias)
		}
		// Only an anchored node can be reached twice (through aliases), so only
		// anchored nodes are remembered.
		if n.Anchor != "" {
			if size, ok := memo[n]; ok {
				return size
			}
			memo[n] = 1 // in progress: a cycle counts once
		}
		plain++
		size := 1
		for _, c := range n.Content {
			if c.Kind == yaml.AliasNode {
				plain++
			}
			size = min(size+walk(c), ceiling)
		}
		if n.Anchor != "" {
			memo[n] = size
		}
		return size
	}
	expanded = walk(root)
	return plain, expanded
}

var allKinds = []string{KindSystem, KindTrunk, KindInboundOverride, KindOutboundRoute, KindTenant, KindAccount, KindInboundRoute, KindWebhook}

func scalarValue(n *yaml.Node) string {
	if n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

func (l *loader) readMetadata(meta *Meta, n *yaml.Node) {
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		l.add(meta, "metadata", "decode.type", "expected a mapping with name and tenant, found "+describe(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		p := "metadata." + k.Value
		meta.lines[p] = k.Line
		switch k.Value {
		case "name", "tenant":
			if v.Kind != yaml.ScalarNode || isNull(v) {
				l.add(meta, p, "decode.type", "expected a string, found "+describe(v))
				continue
			}
			if k.Value == "name" {
				meta.Name = v.Value
			} else {
				meta.Tenant = v.Value
			}
		default:
			l.add(meta, p, "decode.unknownKey", fmt.Sprintf("unknown key %q%s", k.Value, suggest(k.Value, []string{"name", "tenant"})))
		}
	}
}

// checkMetadata applies the specification's rules on which kinds carry a name and a tenant.
func (l *loader) checkMetadata(meta *Meta, present bool) {
	switch meta.Kind {
	case KindSystem:
		if present {
			l.add(meta, "metadata", "doc.metadata", "System takes no metadata")
		}
		return
	case KindTrunk, KindInboundOverride, KindTenant:
		if meta.Tenant != "" {
			l.add(meta, "metadata.tenant", "doc.metadata", meta.Kind+" takes no metadata.tenant"+tenantHint(meta.Kind))
		}
	case KindAccount, KindInboundRoute, KindWebhook:
		if meta.Tenant == "" {
			l.add(meta, "metadata", "doc.metadata", "metadata.tenant is required for "+meta.Kind)
		}
	}
	if meta.Name == "" {
		l.add(meta, "metadata", "doc.metadata", "metadata.name is required for "+meta.Kind)
	}
	if meta.Name != "" && !safeName(meta.Name) {
		l.add(meta, "metadata.name", "doc.name", fmt.Sprintf("name %q may use only letters, digits, '.', '_', '-', '+' and '@', must not start with '.' and has at most 128 characters", meta.Name))
	}
}

func tenantHint(kind string) string {
	if kind == KindTrunk {
		return " (a trunk pins its calls with spec.tenant)"
	}
	if kind == KindInboundOverride {
		return " (the handling tenant is spec.tenant)"
	}
	return ""
}

// safeName reports whether s can be used as a file name component and an id.
func safeName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 128 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.' || r == '_' || r == '-' || r == '+' || r == '@':
		default:
			return false
		}
	}
	return true
}

// newDocument allocates the typed document for meta.Kind, with defaults, and files it.
func (l *loader) newDocument(meta *Meta) reflect.Value {
	switch meta.Kind {
	case KindSystem:
		if l.system != nil {
			l.add(meta, "kind", "doc.systemDuplicate", fmt.Sprintf("a second System document; the first is at %s:%d", l.system.File, l.system.Line))
			s := &System{}
			s.setDefaults()
			return reflect.ValueOf(s) // decoded for its own problems, then dropped
		}
		l.system = meta
		l.cfg.System.Meta = *meta
		l.cfg.System.Meta.lines = meta.lines
		// The decoder records lines into meta.lines, shared with the System's Meta.
		return reflect.ValueOf(&l.cfg.System)
	case KindTrunk:
		return file(&l.cfg.Trunks, &Trunk{Meta: *meta})
	case KindInboundOverride:
		return file(&l.cfg.InboundOverrides, &InboundOverride{Meta: *meta})
	case KindOutboundRoute:
		return file(&l.cfg.OutboundRoutes, &OutboundRoute{Meta: *meta})
	case KindTenant:
		return file(&l.cfg.Tenants, &Tenant{Meta: *meta})
	case KindAccount:
		return file(&l.cfg.Accounts, &Account{Meta: *meta})
	case KindInboundRoute:
		return file(&l.cfg.InboundRoutes, &InboundRoute{Meta: *meta})
	case KindWebhook:
		return file(&l.cfg.Webhooks, &Webhook{Meta: *meta})
	}
	return reflect.Value{}
}

// file fills a document's defaults (its setDefaults keeps Meta), appends it to
// its kind's list and returns it for decoding.
func file[T any](list *[]*T, doc *T) reflect.Value {
	if d, ok := any(doc).(defaulter); ok {
		d.setDefaults()
	}
	*list = append(*list, doc)
	return reflect.ValueOf(doc)
}

func (l *loader) finish() (*Config, *Report, error) {
	if l.nothing {
		l.rep.Problems = append(l.rep.Problems, Problem{File: ".", Line: 0, Msg: "no configuration documents (*.yaml, *.yml) under the configuration root", Rule: "file.empty"})
	}
	l.cfg.complete()
	v := &validator{cfg: l.cfg, l: l}
	v.run()
	l.cfg.resolveSecrets(l)
	l.rep.sort()
	return l.cfg, l.rep, nil
}
