package routing

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"pbx/appliance/config"
)

// outRoute is one compiled OutboundRoute.
type outRoute struct {
	cfg *config.OutboundRoute
	re  *regexp.Regexp
	// contains is a literal the number must contain for an unanchored
	// pattern that starts with one; empty when nothing is known.
	contains string
}

// routeSet is an ordered list of outbound routes with a prefilter: routes
// whose pattern starts with ^ and a literal hang in a trie under that
// literal, the others are always candidates.
type routeSet struct {
	routes []outRoute
	trie   trieNode
	loose  []int // indices of routes not in the trie, ascending
}

type trieNode struct {
	next   map[byte]*trieNode
	routes []int // ascending
}

// newRouteSet compiles rs (already valid) in ascending priority, ties by
// metadata.name.
func newRouteSet(rs []*config.OutboundRoute) routeSet {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b *config.OutboundRoute) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		return strings.Compare(a.Name, b.Name)
	})
	var s routeSet
	for _, r := range sorted {
		re, err := regexp.Compile(r.Pattern)
		if err != nil {
			continue // refused by validation; a route that cannot compile never matches
		}
		i := len(s.routes)
		or := outRoute{cfg: r, re: re}
		anchored, lit := literalPrefix(r.Pattern)
		switch {
		case anchored && lit != "":
			n := &s.trie
			for j := 0; j < len(lit); j++ {
				if n.next == nil {
					n.next = map[byte]*trieNode{}
				}
				c := n.next[lit[j]]
				if c == nil {
					c = &trieNode{}
					n.next[lit[j]] = c
				}
				n = c
			}
			n.routes = append(n.routes, i)
		default:
			if !anchored {
				or.contains = lit
			}
			s.loose = append(s.loose, i)
		}
		s.routes = append(s.routes, or)
	}
	return s
}

// literalPrefix reports whether pattern is anchored at the start of the
// text and the case-sensitive literal every match begins with.
func literalPrefix(pattern string) (anchored bool, lit string) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return false, ""
	}
	re = re.Simplify()
	if re.Op == syntax.OpLiteral && re.Flags&syntax.FoldCase == 0 {
		return false, string(re.Rune)
	}
	if re.Op != syntax.OpConcat || len(re.Sub) == 0 {
		return false, ""
	}
	subs := re.Sub
	if subs[0].Op == syntax.OpBeginText {
		anchored = true
		subs = subs[1:]
	}
	if len(subs) > 0 && subs[0].Op == syntax.OpLiteral && subs[0].Flags&syntax.FoldCase == 0 {
		lit = string(subs[0].Rune)
	}
	return anchored, lit
}

// match returns the first route (in order) whose pattern matches number.
func (s *routeSet) match(number string) (*outRoute, bool) {
	if len(s.routes) == 0 {
		return nil, false
	}
	// Candidates from the trie: every node on number's path. Each node's
	// list is ascending; merge them with the loose list by walking all
	// lists at once and always taking the smallest head.
	var heads [24][]int
	lists := heads[:0]
	if len(s.loose) > 0 {
		lists = append(lists, s.loose)
	}
	n := &s.trie
	for j := 0; j < len(number) && n.next != nil; j++ {
		n = n.next[number[j]]
		if n == nil {
			break
		}
		if len(n.routes) > 0 {
			lists = append(lists, n.routes)
		}
	}
	for {
		best := -1
		for k, l := range lists {
			if len(l) > 0 && (best < 0 || l[0] < lists[best][0]) {
				best = k
			}
		}
		if best < 0 {
			return nil, false
		}
		i := lists[best][0]
		lists[best] = lists[best][1:]
		r := &s.routes[i]
		if r.contains != "" && !strings.Contains(number, r.contains) {
			continue
		}
		if r.re.MatchString(number) {
			return r, true
		}
	}
}

// rewrite applies strip, then prepend.
func rewrite(r *config.OutboundRoute, number string) string {
	rest := number
	if r.Strip > 0 {
		if r.Strip >= len(rest) {
			rest = ""
		} else {
			rest = rest[r.Strip:]
		}
	}
	return r.Prepend + rest
}
