package sipcore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
	"golang.org/x/sync/errgroup"
)

// Server owns the bound listeners and the sipgo user agent, server and
// clients on them.
type Server struct {
	log       *slog.Logger
	opts      Options
	userAgent string
	// serverHeader is the Server header every response carries, made once
	// and shared (a header is never written once made).
	serverHeader sip.Header

	ua  *sipgo.UserAgent
	srv *sipgo.Server

	listeners []*bound
	tcp       *tcpLimits

	draining atomic.Bool

	mu              sync.RWMutex
	methods         []string
	inDialogOptions sipgo.RequestHandler
	loadOver        []func() // see OnLoadOver

	unhandled atomic.Pointer[func(*sip.Response)]
	// inDialog tells the UDP readers whether a BYE belongs to a dialog
	// (SetDialogLookup); without it every BYE goes to the stack.
	inDialog atomic.Pointer[func(*sip.Request) bool]

	parser *sip.Parser // for the UDP readers' stateless answers
	txs    *txTracker
	known  *knownSources
	// register is the REGISTER handler, which the UDP readers run without
	// a transaction (udpregister.go); registers caches its answers.
	register  atomic.Pointer[sipgo.RequestHandler]
	registers *registerCache
	stats     counters

	ready     chan struct{}
	closeOnce sync.Once
	runCancel context.CancelFunc
	runMu     sync.Mutex
}

// bound is one listener after its socket was bound.
type bound struct {
	Listener
	addr       netip.AddrPort // actual local address
	advertised string         // host written in Via and Contact
	udp        *net.UDPConn
	tcp        *net.TCPListener
	tcpLn      *tcpListener // tcp, capped and framed; what sipgo serves
	client     *sipgo.Client
	contact    sip.ContactHeader
}

// New validates the options, binds every listener and builds the SIP stack.
// A listener that cannot bind is reported by id and wraps ErrBind; a tls or
// wss listener is refused with ErrTransportUnsupported.
func New(opts Options, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(opts.Listeners) == 0 {
		return nil, fmt.Errorf("%w: no listeners", ErrInvalidOptions)
	}
	seen := map[string]bool{}
	for _, l := range opts.Listeners {
		if l.ID == "" {
			return nil, fmt.Errorf("%w: listener with empty id", ErrInvalidOptions)
		}
		if seen[l.ID] {
			return nil, fmt.Errorf("%w: duplicate listener id %q", ErrInvalidOptions, l.ID)
		}
		seen[l.ID] = true
		switch normalTransport(l.Transport) {
		case TransportUDP, TransportTCP:
		case TransportTLS, TransportWSS:
			return nil, fmt.Errorf("listener %q: %s: %w (SIP over TLS and WebSocket is not wired to the SIP stack)", l.ID, normalTransport(l.Transport), ErrTransportUnsupported)
		default:
			return nil, fmt.Errorf("listener %q: %q: %w", l.ID, l.Transport, ErrTransportUnsupported)
		}
		if l.BindPort < 0 || l.BindPort > 65535 {
			return nil, fmt.Errorf("%w: listener %q: port %d out of range", ErrInvalidOptions, l.ID, l.BindPort)
		}
	}
	if opts.MaxServerTransactions < 0 {
		return nil, fmt.Errorf("%w: negative transaction cap %d", ErrInvalidOptions, opts.MaxServerTransactions)
	}
	opts.TCP = opts.TCP.withDefaults() // a negative value stays and is refused
	if err := opts.TCP.validate(); err != nil {
		return nil, err
	}
	if sip.UDPMTUSize < UDPMaxMessage+200 {
		sip.UDPMTUSize = UDPMaxMessage + 200
	}
	// sipgo reads Timers J, L and M when a transaction enters the state
	// they time; written only once, so a second Server (tests) does not
	// race the first's transactions. See CompletedLinger.
	if sip.Timer_J != CompletedLinger {
		sip.Timer_J = CompletedLinger
	}
	if sip.Timer_L != CompletedLinger {
		sip.Timer_L = CompletedLinger
	}
	if sip.Timer_M != CompletedLinger {
		sip.Timer_M = CompletedLinger
	}

	s := &Server{log: log, opts: opts, userAgent: opts.userAgent(), ready: make(chan struct{}),
		parser: sip.NewParser(), txs: newTxTracker(opts.maxServerTransactions()), known: newKnownSources(),
		registers: newRegisterCache(opts.maxServerTransactions())}
	s.tcp = newTCPLimits(opts.TCP, opts.Admit, log)
	s.serverHeader = sip.NewHeader("Server", s.userAgent)

	// Bind everything first so a taken port surfaces before anything runs.
	for _, l := range opts.Listeners {
		b, err := bindListener(l)
		if err != nil {
			s.closeSockets()
			return nil, err
		}
		b.advertised = uriHost(advertisedHost(opts.ExternalHost, b.addr.Addr()))
		if b.tcp != nil {
			b.tcpLn = newTCPListener(b.tcp, s.tcp)
		}
		s.listeners = append(s.listeners, b)
	}

	// sipgo's records: no raw message bytes, one value per key, a kind each.
	sources := &sourceRing{}
	sipLog := slog.New(&sipgoHandler{next: log.Handler(), sources: sources})
	ua, err := sipgo.NewUA(
		sipgo.WithUserAgent(s.contactUserOr("pbx")),
		sipgo.WithUserAgentHostname(s.listeners[0].advertised),
		sipgo.WithUserAgentTransportLayerOptions(
			sip.WithTransportLayerLogger(sipLog),
			sip.WithTransportLayerReadFilter(noteSources(sources, s.readFilter)),
		),
		sipgo.WithUserAgentTransactionLayerOptions(
			sip.WithTransactionLayerLogger(sipLog),
			sip.WithTransactionLayerUnhandledResponseHandler(s.onUnhandledResponse),
		),
	)
	if err != nil {
		s.closeSockets()
		return nil, fmt.Errorf("sip user agent: %w", err)
	}
	s.ua = ua
	srv, err := sipgo.NewServer(ua, sipgo.WithServerLogger(sipLog))
	if err != nil {
		s.closeSockets()
		return nil, fmt.Errorf("sip server: %w", err)
	}
	s.srv = srv

	for _, b := range s.listeners {
		copts := []sipgo.ClientOption{
			// rport in every Via the PBX writes (RFC 3581): a peer answers
			// to the port the request came from, through any NAT.
			sipgo.WithClientNAT(),
			sipgo.WithClientLogger(sipLog),
			sipgo.WithClientHostname(b.advertised),
			sipgo.WithClientPort(int(b.addr.Port())),
		}
		if b.Transport == TransportUDP {
			// Send from the listening socket so replies and NAT pinholes
			// reach the port phones know.
			copts = append(copts, sipgo.WithClientConnectionAddr(b.udp.LocalAddr().String()))
		}
		c, err := sipgo.NewClient(ua, copts...)
		if err != nil {
			s.closeSockets()
			return nil, fmt.Errorf("listener %q: sip client: %w", b.ID, err)
		}
		b.client = c
		b.contact = sip.ContactHeader{Address: sip.Uri{
			Scheme: "sip",
			User:   opts.contactUser(),
			Host:   b.advertised,
			Port:   int(b.addr.Port()),
		}}
		if b.Transport != TransportUDP {
			b.contact.Address.UriParams = sip.HeaderParams{{K: "transport", V: b.Transport}}
		}
	}

	srv.OnOptions(s.handleOptions)
	srv.OnNoRoute(s.handleNoRoute)
	s.methods = []string{"OPTIONS"}
	return s, nil
}

func (s *Server) contactUserOr(def string) string {
	if u := s.opts.contactUser(); u != "" {
		return u
	}
	return def
}

func bindListener(l Listener) (*bound, error) {
	host := l.BindHost
	if host == "" {
		host = DefaultBindHost
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("listener %q: bind host %q is not an IP address: %w", l.ID, host, ErrInvalidOptions)
	}
	ip = ip.Unmap()
	b := &bound{Listener: l}
	b.Transport = normalTransport(l.Transport)
	network := "4"
	if ip.Is6() {
		network = "6"
	}
	ap := netip.AddrPortFrom(ip, uint16(l.BindPort))
	switch b.Transport {
	case TransportUDP:
		c, err := net.ListenUDP("udp"+network, net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return nil, fmt.Errorf("listener %q (udp %s): %w: %w", l.ID, ap, ErrBind, err)
		}
		// A burst (a phone fleet re-registering after a power cut, a load
		// test) must queue in the kernel rather than be dropped and
		// retransmitted; the kernel caps the size at net.core.rmem_max.
		_ = c.SetReadBuffer(UDPSocketBuffer)
		_ = c.SetWriteBuffer(UDPSocketBuffer)
		b.udp = c
		b.addr = c.LocalAddr().(*net.UDPAddr).AddrPort()
	case TransportTCP:
		ln, err := net.ListenTCP("tcp"+network, net.TCPAddrFromAddrPort(ap))
		if err != nil {
			return nil, fmt.Errorf("listener %q (tcp %s): %w: %w", l.ID, ap, ErrBind, err)
		}
		b.tcp = ln
		b.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	}
	b.addr = netip.AddrPortFrom(b.addr.Addr().Unmap(), b.addr.Port())
	return b, nil
}

// uriHost brackets an IPv6 literal for use in a SIP URI or Via.
func uriHost(h string) string {
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
		return "[" + h + "]"
	}
	return h
}

// advertisedHost picks the host written in Via and Contact.
func advertisedHost(external string, bind netip.Addr) string {
	if external != "" {
		return external
	}
	if !bind.IsUnspecified() {
		return bind.String()
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			p, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(p.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.Is4() != bind.Is4() {
				continue
			}
			return ip.String()
		}
	}
	if bind.Is6() {
		return "::1"
	}
	return "127.0.0.1"
}

// readFilter applies the admission hook to UDP datagrams. TCP reads pass:
// an accepted connection admits whole messages in its framing (tcpConn),
// and a connection the PBX dialled goes to a peer the PBX chose.
func (s *Server) readFilter(props sip.TransportReadProps, data []byte) ([]byte, error) {
	admit := s.opts.Admit
	if admit == nil || strings.EqualFold(props.Transport, TransportTCP) || s.readByUs(props) {
		return data, nil
	}
	if !admit(addrOf(props.RemoteAddr), strings.ToLower(props.Transport), data) {
		return nil, nil
	}
	return data, nil
}

// readByUs reports whether a datagram came through a UDP listener's
// readers (udp.go), which admitted it already.
func (s *Server) readByUs(props sip.TransportReadProps) bool {
	if !strings.EqualFold(props.Transport, TransportUDP) || props.LocalAddr == nil {
		return false
	}
	for _, b := range s.listeners {
		if b.udp != nil && b.udp.LocalAddr() == props.LocalAddr {
			return true
		}
	}
	return false
}

func (s *Server) onUnhandledResponse(res *sip.Response) {
	if f := s.unhandled.Load(); f != nil {
		(*f)(res)
		return
	}
	s.log.Debug("unhandled sip response", "msg", res.Short())
}

// OnUnhandledResponse sets the function that receives responses matching no
// client transaction, such as a retransmitted 2xx after the INVITE
// transaction ended (the caller must re-send its ACK).
func (s *Server) OnUnhandledResponse(f func(*sip.Response)) {
	s.unhandled.Store(&f)
}

// SetDialogLookup sets the function that reports whether a request belongs
// to a dialog the PBX knows. With it the UDP readers answer a BYE that
// belongs to none, and to no open transaction, 481 without a transaction
// (RFC 3261 12.2.2, statelessly as 8.2.7 allows; Kamailio's sl answers
// so): stray BYEs, such as SIPp sends for each REGISTER it gave up on
// under overload, then cost no transaction kept for CompletedLinger.
func (s *Server) SetDialogLookup(f func(*sip.Request) bool) {
	s.inDialog.Store(&f)
}

// Handle registers h for method. Responses the handler sends through tx carry
// the Server header. While draining, new INVITEs (no To tag) are answered 503
// before h sees them. Handle must be called before Run.
func (s *Server) Handle(method sip.RequestMethod, h sipgo.RequestHandler) {
	s.mu.Lock()
	if !slices.Contains(s.methods, method.String()) {
		s.methods = append(s.methods, method.String())
	}
	s.mu.Unlock()
	wrapped := func(req *sip.Request, tx sip.ServerTransaction) {
		if !s.admitTx(req, tx) {
			return
		}
		stx := s.WrapTx(tx)
		if method == sip.INVITE && s.draining.Load() && !hasToTag(req) {
			res := sip.NewResponseFromRequest(req, sip.StatusServiceUnavailable, "Service Unavailable", nil)
			res.AppendHeader(sip.NewHeader("Retry-After", "60"))
			if err := stx.Respond(res); err != nil {
				s.log.Debug("respond 503 while draining", "err", err)
			}
			return
		}
		h(req, stx)
		if releasesRequest(method) {
			releaseRequest(req)
		}
	}
	if method == sip.REGISTER {
		s.register.Store(&h)
	}
	if method == sip.OPTIONS {
		s.mu.Lock()
		s.inDialogOptions = wrapped
		s.mu.Unlock()
		return
	}
	s.srv.OnRequest(method, wrapped)
}

// HandleNoRoute replaces the default answer to methods nobody registered
// (489, 420 or 405 with Allow; see handleNoRoute).
func (s *Server) HandleNoRoute(h sipgo.RequestHandler) {
	s.srv.OnNoRoute(func(req *sip.Request, tx sip.ServerTransaction) {
		if !s.admitTx(req, tx) {
			return
		}
		h(req, s.WrapTx(tx))
	})
}

func hasToTag(req *sip.Request) bool {
	to := req.To()
	if to == nil {
		return false
	}
	_, ok := to.Params.Get("tag")
	return ok
}

// Allow is the value of the Allow header: every method with a handler.
func (s *Server) Allow() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := slices.Clone(s.methods)
	slices.Sort(m)
	return strings.Join(m, ", ")
}

func (s *Server) handleOptions(req *sip.Request, tx sip.ServerTransaction) {
	if !s.admitTx(req, tx) {
		return
	}
	s.mu.RLock()
	inDialog := s.inDialogOptions
	s.mu.RUnlock()
	if hasToTag(req) && inDialog != nil {
		inDialog(req, tx)
		return
	}
	if err := s.WrapTx(tx).Respond(s.optionsResponse(req)); err != nil {
		s.log.Debug("respond to OPTIONS", "err", err)
	}
}

// optionsResponse is the 200 to an out-of-dialog OPTIONS.
func (s *Server) optionsResponse(req *sip.Request) *sip.Response {
	res := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)
	res.AppendHeader(sip.NewHeader("Allow", s.Allow()))
	res.AppendHeader(sip.NewHeader("Accept", "application/sdp"))
	return res
}

// Drain makes new INVITEs get 503 while dialogs in progress continue.
func (s *Server) Drain() { s.draining.Store(true) }

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// UserAgent returns the product token; empty means the headers are removed.
func (s *Server) UserAgent() string { return s.userAgent }

// UserAgentHeader returns the User-Agent header for requests the PBX builds,
// or nil when the token is empty.
func (s *Server) UserAgentHeader() sip.Header {
	if s.userAgent == "" {
		return nil
	}
	return sip.NewHeader("User-Agent", s.userAgent)
}

// DecorateResponse adds the Server header to res unless present or disabled.
func (s *Server) DecorateResponse(res *sip.Response) {
	if s.userAgent == "" || Header(res, "Server") != nil {
		return
	}
	res.AppendHeader(s.serverHeader)
}

// DecorateRequest adds the User-Agent header to req unless present or
// disabled.
func (s *Server) DecorateRequest(req *sip.Request) {
	if s.userAgent == "" || Header(req, "User-Agent") != nil {
		return
	}
	req.AppendHeader(sip.NewHeader("User-Agent", s.userAgent))
}

// SIP returns the underlying sipgo server (for handlers that need the user
// agent or transport layer).
func (s *Server) SIP() *sipgo.Server { return s.srv }

// Addr returns the bound address of the listener id.
func (s *Server) Addr(id string) (netip.AddrPort, bool) {
	for _, b := range s.listeners {
		if b.ID == id {
			return b.addr, true
		}
	}
	return netip.AddrPort{}, false
}

// Listeners returns the configured listeners with their bound ports.
func (s *Server) Listeners() []Listener {
	out := make([]Listener, 0, len(s.listeners))
	for _, b := range s.listeners {
		l := b.Listener
		l.BindHost = b.addr.Addr().String()
		l.BindPort = int(b.addr.Port())
		out = append(out, l)
	}
	return out
}

// Endpoint is a listener's client and advertised Contact.
type Endpoint struct {
	ListenerID string
	Transport  string // "udp" or "tcp"
	Local      netip.AddrPort
	Host       string // advertised host
	Client     *sipgo.Client
	Contact    sip.ContactHeader
}

func (b *bound) endpoint() Endpoint {
	return Endpoint{ListenerID: b.ID, Transport: b.Transport, Local: b.addr, Host: b.advertised, Client: b.client, Contact: b.contact}
}

// Endpoint returns the first listener of transport ("udp", "tcp"), or the one
// named by listenerID when it is not empty.
func (s *Server) Endpoint(transport, listenerID string) (Endpoint, error) {
	transport = normalTransport(transport)
	for _, b := range s.listeners {
		if listenerID != "" {
			if b.ID == listenerID {
				return b.endpoint(), nil
			}
			continue
		}
		if b.Transport == transport {
			return b.endpoint(), nil
		}
	}
	if listenerID != "" {
		return Endpoint{}, fmt.Errorf("listener %q: %w", listenerID, ErrNoListener)
	}
	return Endpoint{}, fmt.Errorf("%s: %w", transport, ErrNoListener)
}

// EndpointForLocal returns the listener bound at local (as a request's
// local address), falling back to the first listener of transport.
func (s *Server) EndpointForLocal(transport string, local netip.AddrPort) (Endpoint, error) {
	transport = normalTransport(transport)
	for _, b := range s.listeners {
		if b.Transport == transport && b.addr.Port() == local.Port() && (b.addr.Addr() == local.Addr() || b.addr.Addr().IsUnspecified()) {
			return b.endpoint(), nil
		}
	}
	return s.Endpoint(transport, "")
}

// ConnectionOpen reports whether a connection to addr ("ip:port") is in the
// transport's pool (over TCP: the phone's registering connection is open).
func (s *Server) ConnectionOpen(transport, addr string) bool {
	pool := s.ua.TransportLayer().Pool(normalTransport(transport))
	if pool == nil {
		return false
	}
	c := pool.Get(addr)
	if c == nil {
		return false
	}
	// Undo Get's reference without TryClose, which would close a
	// connection whose count reached zero.
	c.Ref(-1)
	return true
}

// Run serves every listener until ctx ends, then closes them. It returns the
// first serve error other than the sockets being closed.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	s.runMu.Lock()
	s.runCancel = cancel
	s.runMu.Unlock()
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	for _, b := range s.listeners {
		b := b
		g.Go(func() error {
			var err error
			switch b.Transport {
			case TransportUDP:
				err = s.serveUDP(b)
			case TransportTCP:
				err = s.srv.ServeTCP(b.tcpLn)
			}
			if err != nil && gctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("listener %q: serve: %w", b.ID, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		s.closeSockets()
		return nil
	})
	g.Go(func() error {
		s.releaseAfterLoad(gctx)
		return nil
	})
	g.Go(func() error {
		if s.waitServing(gctx) {
			s.log.Info("sip listeners serving", "listeners", s.describe())
			close(s.ready)
		}
		return nil
	})
	return g.Wait()
}

// waitServing polls until sipgo knows every UDP listener socket (clients
// sending from a listener's port find it in the pool only then).
func (s *Server) waitServing(ctx context.Context) bool {
	pool := s.ua.TransportLayer().Pool("udp")
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, b := range s.listeners {
			if b.udp == nil {
				continue
			}
			c := pool.Get(b.udp.LocalAddr().String())
			if c == nil {
				all = false
				break
			}
			c.Ref(-1)
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Ready is closed once Run serves every listener.
func (s *Server) Ready() <-chan struct{} { return s.ready }

func (s *Server) describe() string {
	parts := make([]string, 0, len(s.listeners))
	for _, b := range s.listeners {
		parts = append(parts, b.ID+"="+b.Transport+"://"+net.JoinHostPort(b.addr.Addr().String(), strconv.Itoa(int(b.addr.Port()))))
	}
	return strings.Join(parts, " ")
}

func (s *Server) closeSockets() {
	for _, b := range s.listeners {
		if b.udp != nil {
			_ = b.udp.Close()
		}
		switch {
		case b.tcpLn != nil:
			_ = b.tcpLn.Close()
		case b.tcp != nil:
			_ = b.tcp.Close()
		}
	}
}

// TCPStats returns what the TCP listeners counted since New.
func (s *Server) TCPStats() TCPStats { return s.tcp.stats() }

// Close stops Run, closes the sockets and the SIP stack.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.runMu.Lock()
		if s.runCancel != nil {
			s.runCancel()
		}
		s.runMu.Unlock()
		s.closeSockets()
		s.tcp.stop()
		if s.ua != nil {
			_ = s.ua.Close()
		}
	})
	return nil
}
