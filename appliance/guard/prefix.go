package guard

import (
	"fmt"
	"net/netip"
	"slices"
)

// prefixSet matches an address against a list of prefixes with one map
// lookup per distinct prefix length in the list, without allocating.
type prefixSet struct {
	lens []int // distinct prefix lengths, longest first
	set  map[netip.Prefix]struct{}
}

// newPrefixSet parses prefixes ("203.0.113.0/24") and bare addresses
// ("198.51.100.7", a prefix of one address).
func newPrefixSet(list []string) (prefixSet, error) {
	ps := prefixSet{set: make(map[netip.Prefix]struct{}, len(list))}
	for _, s := range list {
		p, err := parsePrefix(s)
		if err != nil {
			return prefixSet{}, err
		}
		ps.set[p] = struct{}{}
		if !slices.Contains(ps.lens, p.Bits()) {
			ps.lens = append(ps.lens, p.Bits())
		}
	}
	slices.Sort(ps.lens)
	slices.Reverse(ps.lens)
	return ps, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		a := p.Addr().Unmap()
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits -= 96
			if bits < 0 {
				return netip.Prefix{}, fmt.Errorf("prefix %q: shorter than the IPv4-mapped range", s)
			}
		}
		return netip.PrefixFrom(a, bits).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an address nor a prefix", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// contains reports whether a (unmapped) lies in one of the prefixes.
func (ps *prefixSet) contains(a netip.Addr) bool {
	for _, l := range ps.lens {
		if l > a.BitLen() {
			continue
		}
		p, err := a.Prefix(l)
		if err != nil {
			continue
		}
		if _, ok := ps.set[p]; ok {
			return true
		}
	}
	return false
}

func (ps *prefixSet) empty() bool { return len(ps.set) == 0 }
