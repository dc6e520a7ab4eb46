package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ruleArg is the position (0-based) of the rule id among the arguments of each
// function that reports a problem or a warning.
var ruleArg = map[string]int{
	"errf":        2,
	"warnf":       2,
	"add":         2,
	"warn":        2,
	"problem":     1,
	"port":        2,
	"nonNegative": 2,
	"readable":    2,
	"prefixes":    2,
	"destination": 4,
}

// ruleUse is one place in the sources that names a rule.
type ruleUse struct {
	pos  token.Position
	what string // the function, or "Problem literal"
	id   string // the literal's value; empty when the rule is not a literal
	bad  string // why the argument is not acceptable, if it is not
}

// ruleUses finds the rule argument of every reporting call and the Rule field of
// every Problem literal in f.
func ruleUses(fset *token.FileSet, f *ast.File) []ruleUse {
	var out []ruleUse
	use := func(pos token.Pos, what string, e ast.Expr) {
		u := ruleUse{pos: fset.Position(pos), what: what}
		switch a := e.(type) {
		case *ast.BasicLit:
			if id, err := strconv.Unquote(a.Value); a.Kind == token.STRING && err == nil {
				u.id = id
			} else {
				u.bad = "rule is " + a.Value + ", not a string"
			}
		case *ast.Ident:
			if a.Name != "rule" {
				u.bad = "takes its rule from " + a.Name + "; pass a literal or a parameter named rule"
			}
		default:
			u.bad = "takes its rule from an expression; pass a literal"
		}
		out = append(out, u)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			var fn string
			switch f := n.Fun.(type) {
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			case *ast.Ident:
				fn = f.Name
			}
			if i, ok := ruleArg[fn]; ok && len(n.Args) > i {
				use(n.Pos(), fn, n.Args[i])
			}
		case *ast.CompositeLit:
			if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "Problem" {
				return true
			}
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Rule" {
						use(kv.Pos(), "Problem literal", kv.Value)
					}
				}
			}
		}
		return true
	})
	return out
}

// TestRuleLiteralsRegistered parses the package's sources and checks that every
// rule id written as a literal where a problem is reported is registered in rules,
// and that every registered rule is reported somewhere. A rule passed on through a
// variable must be the parameter named rule of a helper, whose callers are checked.
func TestRuleLiteralsRegistered(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	literals := 0
	used := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ruleUses(fset, f) {
			switch {
			case u.bad != "":
				t.Errorf("%s: %s %s", u.pos, u.what, u.bad)
			case u.id != "":
				literals++
				used[u.id] = true
				if _, ok := rules[u.id]; !ok {
					t.Errorf("%s: %s uses rule %q, which is not registered in rules.go", u.pos, u.what, u.id)
				}
			}
		}
	}
	// The sources report well over a hundred rules; finding few means the walk broke.
	if literals < 100 {
		t.Fatalf("found only %d rule literals; the source walk is broken", literals)
	}
	for id := range rules {
		if !used[id] {
			t.Errorf("rule %s is registered but no source reports it", id)
		}
	}
}

// TestRuleUses checks the source walk itself on a sample with every shape it judges.
func TestRuleUses(t *testing.T) {
	const src = `package config
func f(v *validator, d *decoder, m *Meta, rule string, x string) {
	v.errf(m, "p", "sip.port", "msg")
	v.warnf(m, "p", "inert.srtp", "msg")
	d.problem("p", "decode.type", "msg")
	v.port(m, "p", "no.suchRule", 1, false)
	v.destination(m, "p", "t", nil, "route.target")
	v.readable(m, "p", rule, "f")
	v.prefixes(m, "p", x, nil)
	v.nonNegative(m, "p", "a"+"b", 0)
	_ = Problem{File: "f", Rule: "file.read"}
	fmt.Errorf("not a reporting call %s", "x")
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "sample.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range ruleUses(fset, f) {
		s := u.what + ":" + u.id
		if u.bad != "" {
			s = u.what + ": " + u.bad
		}
		got = append(got, s)
	}
	want := []string{
		"errf:sip.port", "warnf:inert.srtp", "problem:decode.type", "port:no.suchRule", "destination:route.target",
		"readable:", "prefixes: takes its rule from x; pass a literal or a parameter named rule",
		"nonNegative: takes its rule from an expression; pass a literal", "Problem literal:file.read",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
