package rtpcore

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRelatchPackets is how many consecutive packets from a new source
// address, spread over at least DefaultRelatchSilence with the latched
// source silent, move a latched leg over to it.
const DefaultRelatchPackets = 5

// DefaultRelatchSilence is how long the latched source must have been
// silent before another source can take its place. A NAT rebinding
// silences the old source for good; a stranger spraying packets at the
// port while the phone talks never gets the leg.
const DefaultRelatchSilence = time.Second

// DefaultClockRate is the RTP clock rate of G.711 and telephone-event/8000.
const DefaultClockRate = 8000

// Options configures an Engine.
type Options struct {
	// BindIP is the local address RTP sockets bind to; zero means 0.0.0.0.
	BindIP netip.Addr
	// AdvertiseIP is the address written into SDP (media.externalIp). Zero
	// means BindIP. When both are unspecified, AdvertisedAddr returns the
	// unspecified address and the caller substitutes its signalling address.
	AdvertiseIP netip.Addr
	// PortMin and PortMax bound the RTP port range (media.rtpPortMin/Max);
	// both zero means DefaultPortMin..DefaultPortMax.
	PortMin, PortMax int
	// Quarantine is how long a released port rests; zero means
	// DefaultQuarantine, negative means none.
	Quarantine time.Duration
	// RelatchPackets is how many consecutive packets from a new source
	// re-latch a leg; zero means DefaultRelatchPackets.
	RelatchPackets int
	// RelatchSilence is how long a new source must have been sending, with
	// the latched source silent, before it re-latches; zero means
	// DefaultRelatchSilence.
	RelatchSilence time.Duration
	// NoRTCP leaves each leg's odd port unbound and relays no RTCP. By
	// default the odd port above the RTP port is bound too and RTCP is
	// relayed between bridged legs, unchanged.
	NoRTCP bool
	// MaxPorts bounds the legs with media at once (PortPoolOptions.MaxInUse):
	// a leg beyond it fails with ErrPortsExhausted. Zero means the port
	// range alone bounds them.
	MaxPorts int
	// Priority schedules the relay's threads against the host's other
	// programs (Linux only; see Priority). Zero is PriorityNormal.
	Priority Priority
	// KernelForwarding moves each settled direction of a bridged call
	// (latched, nothing tapping or injecting) into the kernel: a tc
	// program on the interfaces' ingress rewrites its datagrams toward
	// the other far end, and the relay sees none of them (Linux, with
	// CAP_BPF and CAP_NET_ADMIN; where loading fails, the relay logs why
	// and forwards every packet itself).
	KernelForwarding bool
	// KernelInterfaces names the interfaces whose ingress the kernel
	// forwarding watches; empty: every loopback or Ethernet interface up
	// at start.
	KernelInterfaces []string
}

// Engine owns the port pool and every media session of the process.
type Engine struct {
	log       *slog.Logger
	pool      *PortPool
	bindIP    netip.Addr
	advertise netip.Addr
	relatch   int
	relatchQ  time.Duration
	rtcp      bool
	priority  Priority
	epoch     time.Time

	io   engineIO     // the relay's readers, see relay_linux.go
	kern *kernelRelay // nil: the relay forwards every packet (see Options.KernelForwarding)

	mu       sync.Mutex
	sessions map[*Session]struct{}
	closed   bool

	totalsMu    sync.Mutex // held across Totals, and to retire a leg
	retired     Totals     // counters of the legs that closed
	legsCreated atomic.Uint64
}

// New builds an Engine. It binds nothing until legs are created.
func New(opts Options, log *slog.Logger) (*Engine, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if (opts.PortMin == 0) != (opts.PortMax == 0) {
		return nil, fmt.Errorf("rtp port range %d-%d: set both bounds or neither", opts.PortMin, opts.PortMax)
	}
	bind := opts.BindIP
	if !bind.IsValid() {
		bind = netip.IPv4Unspecified()
	}
	pool, err := NewPortPool(PortPoolOptions{
		Min: opts.PortMin, Max: opts.PortMax, BindIP: bind, Quarantine: opts.Quarantine, MaxInUse: opts.MaxPorts,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("media engine: %w", err)
	}
	adv := opts.AdvertiseIP
	if !adv.IsValid() {
		adv = bind
	}
	rl := opts.RelatchPackets
	if rl <= 0 {
		rl = DefaultRelatchPackets
	}
	rq := opts.RelatchSilence
	if rq <= 0 {
		rq = DefaultRelatchSilence
	}
	e := &Engine{
		log:       log,
		pool:      pool,
		bindIP:    bind,
		advertise: adv,
		relatch:   rl,
		relatchQ:  rq,
		rtcp:      !opts.NoRTCP,
		priority:  opts.Priority,
		epoch:     time.Now(),
		sessions:  make(map[*Session]struct{}),
	}
	e.startKernel(opts)
	return e, nil
}

// AdvertisedAddr is the address to put in SDP c= lines.
func (e *Engine) AdvertisedAddr() netip.Addr { return e.advertise }

// BindAddr is the address RTP sockets bind to.
func (e *Engine) BindAddr() netip.Addr { return e.bindIP }

// Pool returns the engine's port pool.
func (e *Engine) Pool() *PortPool { return e.pool }

// EngineStats counts sessions, legs and ports.
type EngineStats struct {
	Sessions         int
	Legs             int
	PortsTotal       int
	PortsInUse       int
	PortsQuarantined int
	PortsExhausted   uint64 // allocations refused: no port could be bound
	// Kernel forwarding (Options.KernelForwarding): the directions of
	// bridged legs forwarded in the kernel now, and moved there so far.
	KernelDirections int
	KernelMoves      uint64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	e.mu.Lock()
	st := EngineStats{Sessions: len(e.sessions)}
	for s := range e.sessions {
		st.Legs += s.legCount()
	}
	e.mu.Unlock()
	st.PortsTotal = e.pool.Size()
	st.PortsInUse = e.pool.InUse()
	st.PortsQuarantined = e.pool.Quarantined()
	st.PortsExhausted = e.pool.Exhausted()
	st.KernelDirections, st.KernelMoves = e.kernelStats()
	return st
}

// Sessions returns the open sessions in no particular order.
func (e *Engine) Sessions() []*Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Session, 0, len(e.sessions))
	for s := range e.sessions {
		out = append(out, s)
	}
	return out
}

// Close closes every session and stops handing out ports.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	ss := make([]*Session, 0, len(e.sessions))
	for s := range e.sessions {
		ss = append(ss, s)
	}
	e.mu.Unlock()
	for _, s := range ss {
		_ = s.Close()
	}
	e.stopIO()
	e.stopKernel()
	return e.pool.Close()
}

func (e *Engine) remove(s *Session) {
	e.mu.Lock()
	delete(e.sessions, s)
	e.mu.Unlock()
}

// mono returns nanoseconds since the engine started on the monotonic clock.
func (e *Engine) mono(t time.Time) int64 { return int64(t.Sub(e.epoch)) }
