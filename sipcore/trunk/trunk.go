package trunk

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"pbx/sipcore"
)

// Defaults of Options and Trunk.
const (
	DefaultPort            = 5060
	DefaultExpiry          = 5 * time.Minute
	DefaultRefreshInterval = 5 * time.Minute
	DefaultRetryMin        = 5 * time.Second
	DefaultRetryMax        = 5 * time.Minute
	DefaultLookupTimeout   = 10 * time.Second
	DefaultRegisterTimeout = 32 * time.Second
)

// Registration states.
const (
	StateDisabled    = "disabled"    // the trunk does not register
	StateRegistering = "registering" // the first attempt is under way
	StateRegistered  = "registered"  // the last attempt succeeded
	StateFailed      = "failed"      // the last attempt failed; retrying
)

// Trunk is one carrier trunk.
type Trunk struct {
	Name   string
	Tenant string // opaque label, returned by Match
	Host   string // host name or address
	Port   int    // 0: DefaultPort
	// SRV resolves Host by its _sip._<transport> SRV records first (RFC 3263
	// section 4.2), as for a URI without a port; set it when no port was
	// configured. Without SRV records the host's addresses on Port are used.
	SRV        bool
	Transport  string // "udp" (default) or "tcp"
	ListenerID string // send through this listener; empty: the first of Transport

	Username string
	Password string

	Register    bool
	Expiry      time.Duration // 0: DefaultExpiry
	ContactUser string        // empty: Username

	MatchIPs []netip.Prefix // trusted besides what the host resolves to
	AutoIPs  bool           // trust what the host resolves to
}

// Options configures a Manager.
type Options struct {
	// SIP sends the registrations; required when a trunk registers.
	SIP *sipcore.Server
	// Resolver looks host names up; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// RefreshInterval between discoveries; 0 means DefaultRefreshInterval.
	RefreshInterval time.Duration
	// LookupTimeout bounds one discovery; 0 means DefaultLookupTimeout.
	LookupTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failed registration.
	RetryMin, RetryMax time.Duration
	// RegisterTimeout bounds one REGISTER exchange, digest included.
	RegisterTimeout time.Duration
	// OnState, when set, is told a trunk's status whenever its registration
	// state or last error changes. It must be quick.
	OnState func(Status)
}

// Status is a trunk's live state.
type Status struct {
	Trunk
	State       string
	ExpiresAt   time.Time // zero when not registered
	LastError   string    // of the last failed registration
	Registered  time.Time // last success
	Addresses   []string  // trusted source addresses: MatchIPs, then discovered ones
	Discovered  time.Time // last good discovery
	LookupError string    // of the last failed discovery
}

// Manager runs the trunks.
type Manager struct {
	log    *slog.Logger
	opts   Options
	trunks []*state
	byName map[string]*state
	index  atomic.Pointer[index]
}

type state struct {
	Trunk
	idx      int
	register chan struct{} // refresh requests for the registration
	lookup   chan struct{} // refresh requests for discovery
	ready    chan struct{} // closed after the first discovery

	mu          sync.Mutex
	found       discovered
	discovered  time.Time
	lookupErr   string
	regState    string
	expiresAt   time.Time
	lastErr     string
	registered  time.Time
	callID      string
	fromTag     string
	cseq        uint32
	expiryAsked time.Duration
}

// New checks the trunks and builds a Manager; Run starts it.
func New(trunks []Trunk, opts Options, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.LookupTimeout <= 0 {
		opts.LookupTimeout = DefaultLookupTimeout
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.RegisterTimeout <= 0 {
		opts.RegisterTimeout = DefaultRegisterTimeout
	}
	m := &Manager{log: log, opts: opts, byName: map[string]*state{}}
	for i, t := range trunks {
		if t.Name == "" || t.Host == "" {
			return nil, fmt.Errorf("%w: trunk %d needs a name and a host", ErrInvalidTrunk, i)
		}
		if _, dup := m.byName[t.Name]; dup {
			return nil, fmt.Errorf("%w: trunk %s defined twice", ErrInvalidTrunk, t.Name)
		}
		if t.Port == 0 {
			t.Port = DefaultPort
		}
		t.Transport = strings.ToLower(t.Transport)
		if t.Transport == "" {
			t.Transport = sipcore.TransportUDP
		}
		if t.Transport != sipcore.TransportUDP && t.Transport != sipcore.TransportTCP {
			return nil, fmt.Errorf("%w: trunk %s: transport %q", ErrInvalidTrunk, t.Name, t.Transport)
		}
		if t.Expiry <= 0 {
			t.Expiry = DefaultExpiry
		}
		if t.ContactUser == "" {
			t.ContactUser = t.Username
		}
		if t.Register && (opts.SIP == nil || t.Username == "") {
			return nil, fmt.Errorf("%w: trunk %s registers without a SIP server or a username", ErrInvalidTrunk, t.Name)
		}
		s := &state{Trunk: t, idx: i, register: make(chan struct{}, 1), lookup: make(chan struct{}, 1), ready: make(chan struct{}),
			regState: StateDisabled, callID: randomToken(24), fromTag: randomToken(12), cseq: 1, expiryAsked: t.Expiry}
		if t.Register {
			s.regState = StateRegistering
		}
		if ip, err := netip.ParseAddr(strings.Trim(t.Host, "[]")); err == nil {
			// An address needs no lookup: trusted and reachable from the start.
			s.found = discovered{host: []netip.Addr{ip.Unmap()}, all: []netip.Addr{ip.Unmap()},
				dest: []netip.AddrPort{netip.AddrPortFrom(ip.Unmap(), uint16(t.Port))}}
			s.discovered = time.Now()
		}
		m.trunks = append(m.trunks, s)
		m.byName[t.Name] = s
	}
	m.reindex()
	return m, nil
}

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func randomToken(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = tokenAlphabet[rand.IntN(len(tokenAlphabet))]
	}
	return string(b)
}

// Run discovers addresses and keeps registrations until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range m.trunks {
		g.Go(func() error {
			m.discoverLoop(gctx, s)
			return nil
		})
		if s.Register {
			g.Go(func() error {
				// The first REGISTER goes where the first discovery says.
				select {
				case <-s.ready:
				case <-gctx.Done():
					return nil
				}
				m.registerLoop(gctx, s)
				return nil
			})
		}
	}
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Refresh re-resolves the named trunk's host and re-registers it now.
func (m *Manager) Refresh(name string) error {
	s, ok := m.byName[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTrunk, name)
	}
	for _, ch := range []chan struct{}{s.lookup, s.register} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// Trunk returns the named trunk as configured (with defaults).
func (m *Manager) Trunk(name string) (Trunk, bool) {
	s, ok := m.byName[name]
	if !ok {
		return Trunk{}, false
	}
	return s.Trunk, true
}

// Status returns every trunk's live state, in configuration order.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.trunks))
	for _, s := range m.trunks {
		out = append(out, s.status(s.AutoIPs))
	}
	return out
}

func (s *state) status(auto bool) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Trunk: s.Trunk, State: s.regState, ExpiresAt: s.expiresAt, LastError: s.lastErr,
		Registered: s.registered, Discovered: s.discovered, LookupError: s.lookupErr}
	st.Password = ""
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			st.Addresses = append(st.Addresses, a)
		}
	}
	for _, p := range s.MatchIPs {
		if p.IsSingleIP() {
			add(p.Addr().String())
		} else {
			add(p.String())
		}
	}
	if auto {
		for _, a := range s.found.all {
			add(a.String())
		}
	}
	return st
}

// Destination is where calls and registrations to the trunk go first: its
// address, its most preferred SRV target, or the first address its host
// resolved to (IPv4 first). ok is false while a host name has not resolved.
func (m *Manager) Destination(name string) (netip.AddrPort, bool) {
	s, ok := m.byName[name]
	if !ok {
		return netip.AddrPort{}, false
	}
	return s.destination()
}

// Destinations is every place a request to the trunk may go, most
// preferred first: a client that gets no answer or a 503 from one tries the
// next (RFC 3263 section 4.3).
func (m *Manager) Destinations(name string) []netip.AddrPort {
	s, ok := m.byName[name]
	if !ok {
		return nil
	}
	return s.destinations()
}

func (s *state) destination() (netip.AddrPort, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.found.dest) == 0 {
		return netip.AddrPort{}, false
	}
	return s.found.dest[0], true
}

func (s *state) destinations() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.found.dest)
}

// index maps source addresses to trunks.
type index struct {
	exact    map[netip.Addr][]int
	prefixes []prefixEntry
}

type prefixEntry struct {
	p   netip.Prefix
	idx int
}

func (m *Manager) reindex() {
	ix := &index{exact: map[netip.Addr][]int{}}
	add := func(a netip.Addr, i int) {
		if l := ix.exact[a]; len(l) == 0 || l[len(l)-1] != i {
			ix.exact[a] = append(l, i)
		}
	}
	for i, s := range m.trunks {
		for _, p := range s.MatchIPs {
			if p.IsSingleIP() {
				add(p.Addr().Unmap(), i)
			} else {
				ix.prefixes = append(ix.prefixes, prefixEntry{p: p.Masked(), idx: i})
			}
		}
		if s.AutoIPs {
			s.mu.Lock()
			for _, a := range s.found.all {
				add(a, i)
			}
			s.mu.Unlock()
		}
	}
	for a, l := range ix.exact {
		slices.Sort(l)
		ix.exact[a] = slices.Compact(l)
	}
	m.index.Store(ix)
}

// Match returns the trunk that packets from src belong to. user is the
// Request-URI user, which picks between trunks sharing an address.
func (m *Manager) Match(src netip.Addr, user string) (Trunk, bool) {
	ix := m.index.Load()
	src = src.Unmap()
	var cands [8]int
	list := append(cands[:0], ix.exact[src]...)
	for _, pe := range ix.prefixes {
		if pe.p.Contains(src) {
			list = append(list, pe.idx)
		}
	}
	if len(list) == 0 {
		return Trunk{}, false
	}
	best := -1
	if user != "" && len(list) > 1 {
		for _, i := range list {
			if t := m.trunks[i]; (t.ContactUser == user || t.Username == user) && (best < 0 || i < best) {
				best = i
			}
		}
	}
	if best < 0 {
		best = slices.Min(list)
	}
	return m.trunks[best].Trunk, true
}

func (m *Manager) discoverLoop(ctx context.Context, s *state) {
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.lookup:
		}
		m.discoverOnce(ctx, s)
		if first {
			close(s.ready)
			first = false
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(m.opts.RefreshInterval)
	}
}

// discoverOnce resolves s's host; a failure keeps the last good set.
func (m *Manager) discoverOnce(ctx context.Context, s *state) {
	lctx, cancel := context.WithTimeout(ctx, m.opts.LookupTimeout)
	d, err := discover(lctx, m.opts.Resolver, s.Host, s.Transport, s.Port, s.SRV)
	cancel()
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	changed := false
	if err != nil {
		s.lookupErr = err.Error()
	} else {
		changed = !slices.Equal(d.all, s.found.all) || !slices.Equal(d.dest, s.found.dest)
		s.found, s.discovered, s.lookupErr = d, time.Now(), ""
	}
	s.mu.Unlock()
	if err != nil {
		m.log.Warn("trunk address discovery failed; keeping the last good addresses", "trunk", s.Name, "host", s.Host, "err", err)
		return
	}
	if changed {
		m.log.Info("trunk addresses", "trunk", s.Name, "host", s.Host, "addresses", fmt.Sprint(d.all), "destinations", fmt.Sprint(d.dest))
		m.reindex()
	}
}
