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

// TestRuleLiteralsRegistered parses the package's sources and checks that every
// rule id written as a literal where a problem is reported is registered in rules.
// A rule passed on through a variable must be the parameter named rule of a helper,
// whose callers are checked in turn.
func TestRuleLiteralsRegistered(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	literals := 0
	used := map[string]bool{}
	check := func(pos token.Pos, what string, e ast.Expr) {
		switch a := e.(type) {
		case *ast.BasicLit:
			if a.Kind != token.STRING {
				t.Errorf("%s: %s: rule is %s, not a string", fset.Position(pos), what, a.Value)
				return
			}
			id, err := strconv.Unquote(a.Value)
			if err != nil {
				t.Fatal(err)
			}
			literals++
			used[id] = true
			if _, ok := rules[id]; !ok {
				t.Errorf("%s: %s uses rule %q, which is not registered in rules.go", fset.Position(pos), what, id)
			}
		case *ast.Ident:
			if a.Name != "rule" {
				t.Errorf("%s: %s takes its rule from %s; pass a literal or a parameter named rule", fset.Position(pos), what, a.Name)
			}
		default:
			t.Errorf("%s: %s takes its rule from an expression; pass a literal", fset.Position(pos), what)
		}
	}
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
				i, ok := ruleArg[fn]
				if !ok || len(n.Args) <= i {
					return true
				}
				check(n.Pos(), fn, n.Args[i])
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "Problem" {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Rule" {
							check(kv.Pos(), "Problem literal", kv.Value)
						}
					}
				}
			}
			return true
		})
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
