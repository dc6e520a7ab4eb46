package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// decoder walks a yaml.Node tree into a typed value. It records the line of every
// key it meets and reports every problem instead of stopping at the first, which is
// why it is written here rather than relying on yaml's strict mode (that stops at a
// custom unmarshaler and gives no field paths).
type decoder struct {
	meta *Meta
	add  func(m *Meta, path, rule, msg string)
}

// defaulter is implemented by types whose zero value is not their default. The
// decoder calls it on every value it allocates (a pointer block, a list element).
type defaulter interface{ setDefaults() }

var (
	durationType = reflect.TypeOf(Duration(0))
	listenerType = reflect.TypeOf(Listener{})
)

func (d *decoder) record(path string, line int) {
	if path != "" {
		d.meta.lines[path] = line
	}
}

func (d *decoder) problem(path, rule, format string, args ...any) {
	d.add(d.meta, path, rule, fmt.Sprintf(format, args...))
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!null":
		return "null"
	}
	return strconv.Quote(n.Value)
}

// decode stores n into v (addressable). path names v for problems.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if n == nil {
		return
	}
	t := v.Type()
	switch {
	case t == durationType:
		d.decodeDuration(n, v, path)
		return
	case t == listenerType:
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			l := Listener{Transport: n.Value, Bare: true}
			v.Set(reflect.ValueOf(l))
			return
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			v.Set(reflect.Zero(t))
			return
		}
		if v.IsNil() {
			nv := reflect.New(t.Elem())
			if df, ok := nv.Interface().(defaulter); ok {
				df.setDefaults()
			}
			v.Set(nv)
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if isNull(n) {
			v.Set(reflect.Zero(t))
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.problem(path, "decode.type", "expected a list, found %s", describe(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.record(p, item.Line)
			ev := s.Index(i)
			if df, ok := ev.Addr().Interface().(defaulter); ok {
				df.setDefaults()
			}
			d.decode(item, ev, p)
		}
		v.Set(s)
	case reflect.Map:
		if isNull(n) {
			v.Set(reflect.Zero(t))
			return
		}
		if n.Kind != yaml.MappingNode {
			d.problem(path, "decode.type", "expected a mapping, found %s", describe(n))
			return
		}
		m := reflect.MakeMapWithSize(t, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := resolve(n.Content[i]), n.Content[i+1]
			p := joinPath(path, k.Value)
			d.record(p, k.Line)
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				d.problem(p, "decode.duplicateKey", "key %q appears twice", k.Value)
				continue
			}
			ev := reflect.New(t.Elem()).Elem()
			d.decode(val, ev, p)
			m.SetMapIndex(reflect.ValueOf(k.Value), ev)
		}
		v.Set(m)
	default:
		d.decodeScalar(n, v, path)
	}
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return // an explicit null leaves the default, as for every other scalar
	}
	if n.Kind != yaml.ScalarNode {
		d.problem(path, "decode.type", "expected a duration such as \"30s\" or \"1m30s\", found %s", describe(n))
		return
	}
	dur, err := ParseDuration(n.Value)
	if err != nil {
		d.problem(path, "decode.duration", "invalid duration: %v", err)
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		if isNull(n) {
			return // an explicit null leaves the default
		}
		d.problem(path, "decode.type", "expected %s, found %s", scalarName(v.Kind()), describe(n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Tag != "!!bool" {
			d.problem(path, "decode.type", "expected true or false, found %s", describe(n))
			return
		}
		b, _ := strconv.ParseBool(n.Value)
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Tag != "!!int" {
			d.problem(path, "decode.type", "expected a whole number, found %s", describe(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || i > math.MaxInt32 || i < math.MinInt32 {
			d.problem(path, "decode.type", "number %s is out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Tag != "!!int" && n.Tag != "!!float" {
			d.problem(path, "decode.type", "expected a number, found %s", describe(n))
			return
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.problem(path, "decode.type", "expected a finite number, found %s", describe(n))
			return
		}
		v.SetFloat(f)
	default:
		panic("config: unsupported field kind " + v.Kind().String())
	}
}

func scalarName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	}
	return "a scalar"
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.problem(path, "decode.type", "expected a mapping, found %s", describe(n))
		return
	}
	fi := fieldsOf(v.Type())
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		p := joinPath(path, k.Value)
		if seen[k.Value] {
			d.record(p, k.Line)
			d.problem(p, "decode.duplicateKey", "key %q appears twice", k.Value)
			continue
		}
		seen[k.Value] = true
		idx, ok := fi.byName[k.Value]
		if !ok {
			d.record(p, k.Line)
			d.problem(p, "decode.unknownKey", "unknown key %q%s", k.Value, suggest(k.Value, fi.names))
			continue
		}
		d.record(p, k.Line)
		d.decode(val, v.Field(idx), p)
	}
}

type fieldInfo struct {
	byName map[string]int
	names  []string
}

var fieldCache sync.Map // reflect.Type -> *fieldInfo

func fieldsOf(t reflect.Type) *fieldInfo {
	if fi, ok := fieldCache.Load(t); ok {
		return fi.(*fieldInfo)
	}
	fi := &fieldInfo{byName: map[string]int{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		fi.byName[name] = i
		fi.names = append(fi.names, name)
	}
	sort.Strings(fi.names)
	fieldCache.Store(t, fi)
	return fi
}

// KnownKeys returns the keys a document kind's spec accepts at the given path
// ("" for the top of spec), for documentation and completion.
func KnownKeys(v any) []string {
	return append([]string(nil), fieldsOf(reflect.TypeOf(v)).names...)
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// suggest names the known key nearest to an unknown one.
func suggest(key string, known []string) string {
	best, bestD := "", math.MaxInt
	lk := strings.ToLower(key)
	for _, k := range known {
		dist := levenshtein(lk, strings.ToLower(k))
		if dist < bestD || (dist == bestD && k < best) {
			best, bestD = k, dist
		}
	}
	if best == "" {
		return " (this block takes no keys)"
	}
	limit := max(2, len(key)/3)
	if bestD <= limit || strings.HasPrefix(strings.ToLower(best), lk) || strings.HasPrefix(lk, strings.ToLower(best)) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf(" (expected one of: %s)", strings.Join(known, ", "))
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
