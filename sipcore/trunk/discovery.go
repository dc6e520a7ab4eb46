package trunk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// discovered is one good discovery result.
type discovered struct {
	host []netip.Addr     // the host's own A and AAAA records
	all  []netip.Addr     // host records and SRV targets, sorted, unique (trusted sources)
	dest []netip.AddrPort // where requests go, most preferred first
}

// discover resolves host to the addresses a carrier sends from: the host
// itself when it is an address, else its A and AAAA records and the
// targets of its _sip._udp and _sip._tcp SRV records. A lookup that found
// nothing is not an error; one that failed (time-out, server failure) is,
// and so is finding no address at all.
//
// It also orders where requests to the trunk go (RFC 3263 section 4.2):
// when srv is set (no port was configured) and the host has SRV records for
// transport, their targets on their ports, by priority and then weight
// (net.Resolver.LookupSRV already sorts by priority and shuffles by weight
// as RFC 2782 says); otherwise the host's addresses on port, IPv4 first.
func discover(ctx context.Context, r *net.Resolver, host, transport string, port int, srv bool) (discovered, error) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		return discovered{host: []netip.Addr{ip}, all: []netip.Addr{ip}, dest: []netip.AddrPort{netip.AddrPortFrom(ip, uint16(port))}}, nil
	}
	fqdn := host
	if !strings.HasSuffix(fqdn, ".") {
		fqdn += "."
	}
	var d discovered
	ips, err := lookupIPs(ctx, r, fqdn)
	if err != nil {
		return discovered{}, err
	}
	d.host = ips
	all := slices.Clone(ips)
	var viaSRV []netip.AddrPort
	for _, proto := range []string{"udp", "tcp"} {
		_, srvs, err := r.LookupSRV(ctx, "sip", proto, fqdn)
		if err != nil && !notFound(err) {
			return discovered{}, fmt.Errorf("SRV _sip._%s.%s: %w", proto, fqdn, err)
		}
		for _, s := range srvs {
			if s.Target == "." || s.Target == "" {
				continue
			}
			tips, err := lookupIPs(ctx, r, s.Target)
			if err != nil {
				return discovered{}, err
			}
			all = append(all, tips...)
			if srv && proto == transport {
				for _, ip := range ipv4First(tips) {
					viaSRV = append(viaSRV, netip.AddrPortFrom(ip, s.Port))
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b netip.Addr) int { return a.Compare(b) })
	all = slices.Compact(all)
	if len(all) == 0 {
		return discovered{}, fmt.Errorf("%s: %w", host, ErrNoAddress)
	}
	d.all = all
	d.dest = viaSRV
	if len(d.dest) == 0 {
		for _, ip := range ipv4First(ips) {
			d.dest = append(d.dest, netip.AddrPortFrom(ip, uint16(port)))
		}
	}
	return d, nil
}

// ipv4First orders addresses IPv4 before IPv6, keeping each family's order:
// a carrier reached over IPv4 is the common case on an office network.
func ipv4First(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	slices.SortStableFunc(out, func(a, b netip.Addr) int {
		switch {
		case a.Is4() == b.Is4():
			return 0
		case a.Is4():
			return -1
		default:
			return 1
		}
	})
	return out
}

func lookupIPs(ctx context.Context, r *net.Resolver, name string) ([]netip.Addr, error) {
	ips, err := r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("A/AAAA %s: %w", name, err)
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.Unmap())
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
