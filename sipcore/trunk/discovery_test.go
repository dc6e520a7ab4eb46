package trunk

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zone is a DNS server on loopback whose records a test can change, and
// make fail (SERVFAIL) on demand.
type zone struct {
	mu      sync.Mutex
	a       map[string][]string
	aaaa    map[string][]string
	srv     map[string][]*dns.SRV
	fail    bool
	queries int
	addr    string
}

func startZone(t *testing.T) *zone {
	t.Helper()
	z := &zone{a: map[string][]string{}, aaaa: map[string][]string{}, srv: map[string][]*dns.SRV{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z.addr = pc.LocalAddr().String()
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(z.serve), NotifyStartedFunc: func() { close(started) }}
	go func() { _ = srv.ActivateAndServe() }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("dns server did not start")
	}
	t.Cleanup(func() { _ = srv.Shutdown() })
	return z
}

func (z *zone) serve(w dns.ResponseWriter, q *dns.Msg) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.queries++
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if z.fail {
		m.Rcode = dns.RcodeServerFailure
		_ = w.WriteMsg(m)
		return
	}
	name := strings.ToLower(q.Question[0].Name)
	known := len(z.a[name])+len(z.aaaa[name])+len(z.srv[name]) > 0
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Question[0].Name, Rrtype: t, Class: dns.ClassINET, Ttl: 1}
	}
	switch q.Question[0].Qtype {
	case dns.TypeA:
		for _, a := range z.a[name] {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP(a)})
		}
	case dns.TypeAAAA:
		for _, a := range z.aaaa[name] {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP(a)})
		}
	case dns.TypeSRV:
		for _, s := range z.srv[name] {
			rr := *s
			rr.Hdr = hdr(dns.TypeSRV)
			m.Answer = append(m.Answer, &rr)
		}
	}
	if !known {
		m.Rcode = dns.RcodeNameError
	}
	_ = w.WriteMsg(m)
}

func (z *zone) set(f func(z *zone)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	f(z)
}

func (z *zone) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", z.addr)
	}}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestDiscoverRecords(t *testing.T) {
	z := startZone(t)
	z.set(func(z *zone) {
		z.a["carrier.test."] = []string{"127.0.0.20", "127.0.0.21"}
		z.aaaa["carrier.test."] = []string{"::1"}
		z.srv["_sip._udp.carrier.test."] = []*dns.SRV{{Target: "edge1.carrier.test.", Port: 5060, Priority: 10, Weight: 1}}
		z.srv["_sip._tcp.carrier.test."] = []*dns.SRV{{Target: "edge2.carrier.test.", Port: 5060, Priority: 10, Weight: 1}}
		z.a["edge1.carrier.test."] = []string{"127.0.0.30"}
		z.a["edge2.carrier.test."] = []string{"127.0.0.31"}
		z.a["plain.test."] = []string{"127.0.0.40"}
		z.srv["_sip._udp.srvonly.test."] = []*dns.SRV{{Target: "edge1.carrier.test.", Port: 5060}}
		z.srv["_sip._udp.prio.test."] = []*dns.SRV{
			{Target: "edge2.carrier.test.", Port: 5080, Priority: 20, Weight: 1},
			{Target: "edge1.carrier.test.", Port: 5070, Priority: 10, Weight: 1},
		}
	})
	r := z.resolver()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ap := func(ss ...string) []netip.AddrPort {
		var out []netip.AddrPort
		for _, s := range ss {
			out = append(out, netip.MustParseAddrPort(s))
		}
		return out
	}
	tests := []struct {
		host      string
		transport string
		srv       bool
		host4, al []netip.Addr
		dest      []netip.AddrPort
		err       bool
	}{
		{"carrier.test", "udp", false, addrs("127.0.0.20", "127.0.0.21", "::1"), addrs("127.0.0.20", "127.0.0.21", "127.0.0.30", "127.0.0.31", "::1"),
			ap("127.0.0.20:5090", "127.0.0.21:5090", "[::1]:5090"), false},
		// No port configured: the SRV records of the trunk's transport win (RFC 3263 4.2).
		{"carrier.test", "udp", true, addrs("127.0.0.20", "127.0.0.21", "::1"), addrs("127.0.0.20", "127.0.0.21", "127.0.0.30", "127.0.0.31", "::1"),
			ap("127.0.0.30:5060"), false},
		{"carrier.test", "tcp", true, addrs("127.0.0.20", "127.0.0.21", "::1"), addrs("127.0.0.20", "127.0.0.21", "127.0.0.30", "127.0.0.31", "::1"),
			ap("127.0.0.31:5060"), false},
		{"plain.test.", "udp", true, addrs("127.0.0.40"), addrs("127.0.0.40"), ap("127.0.0.40:5090"), false},
		{"srvonly.test", "udp", true, nil, addrs("127.0.0.30"), ap("127.0.0.30:5060"), false},
		{"srvonly.test", "udp", false, nil, addrs("127.0.0.30"), nil, false},
		{"prio.test", "udp", true, nil, addrs("127.0.0.30", "127.0.0.31"), ap("127.0.0.30:5070", "127.0.0.31:5080"), false},
		{"127.0.0.9", "udp", true, addrs("127.0.0.9"), addrs("127.0.0.9"), ap("127.0.0.9:5090"), false},
		{"nothing.test", "udp", true, nil, nil, nil, true},
	}
	for _, tt := range tests {
		d, err := discover(ctx, r, tt.host, tt.transport, 5090, tt.srv)
		if (err != nil) != tt.err {
			t.Errorf("%s: err %v", tt.host, err)
			continue
		}
		if !slices.Equal(d.host, tt.host4) || !slices.Equal(d.all, tt.al) || !slices.Equal(d.dest, tt.dest) {
			t.Errorf("%s %s srv=%v: host %v all %v dest %v; want %v %v %v", tt.host, tt.transport, tt.srv, d.host, d.all, d.dest, tt.host4, tt.al, tt.dest)
		}
	}
}

// TestDiscoveryRefresh: the periodic refresh picks a changed record up, and
// a failing server keeps the last good set while the error is reported.
func TestDiscoveryRefresh(t *testing.T) {
	z := startZone(t)
	z.set(func(z *zone) {
		z.a["carrier.test."] = []string{"127.0.0.20"}
		z.srv["_sip._udp.carrier.test."] = []*dns.SRV{{Target: "edge.carrier.test.", Port: 5060}}
		z.a["edge.carrier.test."] = []string{"127.0.0.30"}
	})
	m, err := New([]Trunk{
		{Name: "carrier", Host: "carrier.test", AutoIPs: true, MatchIPs: []netip.Prefix{netip.MustParsePrefix("127.0.5.0/24")}},
		{Name: "manual", Host: "carrier.test", AutoIPs: false, MatchIPs: []netip.Prefix{netip.MustParsePrefix("127.0.0.50/32")}},
	}, Options{Resolver: z.resolver(), RefreshInterval: 150 * time.Millisecond, LookupTimeout: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	matches := func(ip string) string {
		tr, ok := m.Match(netip.MustParseAddr(ip), "")
		if !ok {
			return ""
		}
		return tr.Name
	}
	waitFor(t, "first discovery", func() bool { return matches("127.0.0.20") == "carrier" && matches("127.0.0.30") == "carrier" })
	if got := matches("127.0.5.77"); got != "carrier" {
		t.Errorf("prefix from matchIps: %q", got)
	}
	if got := matches("127.0.0.50"); got != "manual" {
		t.Errorf("matchIps of a trunk without autoIps: %q", got)
	}
	if got := matches("127.0.0.99"); got != "" {
		t.Errorf("stranger matched %q", got)
	}
	st := m.Status()[0]
	if want := []string{"127.0.5.0/24", "127.0.0.20", "127.0.0.30"}; !slices.Equal(st.Addresses, want) {
		t.Errorf("addresses %v, want %v", st.Addresses, want)
	}
	if st.State != StateDisabled || st.Discovered.IsZero() {
		t.Errorf("status %+v", st)
	}
	if m.Status()[1].Addresses[0] != "127.0.0.50" || len(m.Status()[1].Addresses) != 1 {
		t.Errorf("manual trunk addresses %v", m.Status()[1].Addresses)
	}

	// The carrier moves an edge: the refresh picks it up without a restart.
	z.set(func(z *zone) { z.a["edge.carrier.test."] = []string{"127.0.0.31"} })
	waitFor(t, "changed record", func() bool { return matches("127.0.0.31") == "carrier" && matches("127.0.0.30") == "" })

	// The server fails: the last good set stays, and the error is shown.
	z.set(func(z *zone) { z.fail = true; z.queries = 0 })
	waitFor(t, "failed refresh reported", func() bool { return m.Status()[0].LookupError != "" })
	z.mu.Lock()
	q := z.queries
	z.mu.Unlock()
	if q == 0 {
		t.Fatal("no query reached the failing server")
	}
	if matches("127.0.0.20") != "carrier" || matches("127.0.0.31") != "carrier" {
		t.Errorf("a failed refresh dropped the last good addresses: %v", m.Status()[0].Addresses)
	}
	if dst, ok := m.Destination("carrier"); !ok || dst != netip.MustParseAddrPort("127.0.0.20:5060") {
		t.Errorf("destination %v %v", dst, ok)
	}

	// The server recovers: the error clears.
	z.set(func(z *zone) { z.fail = false })
	waitFor(t, "recovery", func() bool { return m.Status()[0].LookupError == "" })

	// A manual refresh re-resolves at once even with a long interval.
	if err := m.Refresh("nope"); err == nil {
		t.Error("refresh of an unknown trunk succeeded")
	}
}

func TestRefreshResolvesNow(t *testing.T) {
	z := startZone(t)
	z.set(func(z *zone) { z.a["carrier.test."] = []string{"127.0.0.20"} })
	m, err := New([]Trunk{{Name: "carrier", Host: "carrier.test", AutoIPs: true}},
		Options{Resolver: z.resolver(), RefreshInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = m.Run(ctx) }()
	waitFor(t, "first discovery", func() bool { _, ok := m.Match(netip.MustParseAddr("127.0.0.20"), ""); return ok })
	z.set(func(z *zone) { z.a["carrier.test."] = []string{"127.0.0.21"} })
	if err := m.Refresh("carrier"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refresh", func() bool { _, ok := m.Match(netip.MustParseAddr("127.0.0.21"), ""); return ok })
}

func TestMatchSharedAddress(t *testing.T) {
	m, err := New([]Trunk{
		{Name: "a", Host: "127.0.0.7", AutoIPs: true, Username: "acct-a"},
		{Name: "b", Host: "127.0.0.7", AutoIPs: true, Username: "acct-b", ContactUser: "pbx-b"},
		{Name: "net", Host: "192.0.2.1", MatchIPs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/24")}},
	}, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ ip, user, want string }{
		{"127.0.0.7", "", "a"},
		{"127.0.0.7", "+1555", "a"},
		{"127.0.0.7", "pbx-b", "b"},
		{"127.0.0.7", "acct-a", "a"},
		{"127.0.0.8", "pbx-b", "net"},
		{"::ffff:127.0.0.7", "pbx-b", "b"},
	} {
		tr, ok := m.Match(netip.MustParseAddr(tt.ip), tt.user)
		if !ok || tr.Name != tt.want {
			t.Errorf("%s %q: %q %v, want %q", tt.ip, tt.user, tr.Name, ok, tt.want)
		}
	}
	if _, ok := m.Match(netip.MustParseAddr("10.0.0.1"), ""); ok {
		t.Error("stranger matched")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkMatch times identifying the trunk of an INVITE's source among
// 1,000 trunks with an address each and 100 prefixes.
func BenchmarkMatch(b *testing.B) {
	var trunks []Trunk
	for i := range 1000 {
		trunks = append(trunks, Trunk{Name: "t" + strconv.Itoa(i), Host: fmt.Sprintf("10.%d.%d.1", i/256, i%256), AutoIPs: true})
	}
	for i := range 100 {
		trunks = append(trunks, Trunk{Name: "p" + strconv.Itoa(i), Host: "192.0.2.1", MatchIPs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("172.16.%d.0/24", i))}})
	}
	m, err := New(trunks, Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	srcs := []netip.Addr{netip.MustParseAddr("10.1.44.1"), netip.MustParseAddr("172.16.99.7"), netip.MustParseAddr("203.0.113.9")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.Match(srcs[i%len(srcs)], "+15551234")
	}
}
