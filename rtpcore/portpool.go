package rtpcore

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Port range and quarantine defaults.
const (
	DefaultPortMin = 10000
	DefaultPortMax = 20000
	// DefaultQuarantine is short: at 200 ms the default range's 5,000 port
	// pairs carry 2,000 one-second calls a second (two legs each), and the
	// far ends of a call that ended stop sending well within it; a stray
	// late packet cannot take a new leg over anyway (see relatching).
	DefaultQuarantine = 200 * time.Millisecond
)

// PortPoolOptions configures a PortPool.
type PortPoolOptions struct {
	// Min and Max bound the range, inclusive. Both zero means
	// DefaultPortMin..DefaultPortMax. Only even ports p with p+1 <= Max are
	// handed out; p+1 is left for RTCP.
	Min, Max int
	// BindIP is the address sockets bind to; the zero value binds every
	// IPv4 address (0.0.0.0).
	BindIP netip.Addr
	// Quarantine is how long a released port rests before it is handed out
	// again; zero means DefaultQuarantine, negative means no quarantine.
	Quarantine time.Duration
	// MaxInUse bounds the ports handed out at once, below what the range
	// holds; zero means the range alone bounds them. Each port is a socket
	// (two with AllocatePair), so the bound keeps the media from taking
	// every descriptor the process may open (see Options.MaxPorts).
	MaxInUse int
}

type quarantined struct {
	port  int
	until time.Time
}

// PortPool hands out bound UDP sockets on even ports of a range. Released
// ports are quarantined before reuse. It is safe for concurrent use.
type PortPool struct {
	bindIP     netip.Addr
	min, max   int
	quarantine time.Duration
	maxInUse   int
	log        *slog.Logger
	now        func() time.Time

	exhausted atomic.Uint64

	mu      sync.Mutex
	free    []int // FIFO: least recently used first
	resting []quarantined
	inUse   map[int]struct{}
	closed  bool
}

// NewPortPool checks the range and returns a pool; it binds nothing yet.
func NewPortPool(opts PortPoolOptions, log *slog.Logger) (*PortPool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lo, hi := opts.Min, opts.Max
	if lo == 0 && hi == 0 {
		lo, hi = DefaultPortMin, DefaultPortMax
	}
	if lo <= 0 || hi > 65535 || hi <= lo {
		return nil, fmt.Errorf("rtp port range %d-%d: want 0 < min < max <= 65535", opts.Min, opts.Max)
	}
	first := lo + lo%2
	if first+1 > hi {
		return nil, fmt.Errorf("rtp port range %d-%d: holds no even/odd port pair", opts.Min, opts.Max)
	}
	q := opts.Quarantine
	if q == 0 {
		q = DefaultQuarantine
	}
	if q < 0 {
		q = 0
	}
	bind := opts.BindIP
	if !bind.IsValid() {
		bind = netip.IPv4Unspecified()
	}
	p := &PortPool{
		bindIP:     bind,
		min:        lo,
		max:        hi,
		quarantine: q,
		maxInUse:   max(opts.MaxInUse, 0),
		log:        log,
		now:        time.Now,
		inUse:      make(map[int]struct{}),
	}
	for port := first; port+1 <= hi; port += 2 {
		p.free = append(p.free, port)
	}
	return p, nil
}

// Size is the number of ports the pool can hand out.
func (p *PortPool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) + len(p.resting) + len(p.inUse)
}

// InUse is the number of ports handed out and not yet released.
func (p *PortPool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inUse)
}

// Quarantined is the number of released ports still resting.
func (p *PortPool) Quarantined() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wakeLocked(p.now())
	return len(p.resting)
}

// wakeLocked moves ports whose quarantine is over back to the free list.
func (p *PortPool) wakeLocked(now time.Time) {
	n := 0
	for n < len(p.resting) && !now.Before(p.resting[n].until) {
		p.free = append(p.free, p.resting[n].port)
		n++
	}
	if n > 0 {
		p.resting = append(p.resting[:0], p.resting[n:]...)
	}
}

// Allocate binds a UDP socket on a free even port and returns it. A port
// that another process holds is skipped (and retried after a quarantine).
// It returns ErrPortsExhausted when no port can be bound.
func (p *PortPool) Allocate() (*net.UDPConn, error) {
	rtp, _, err := p.allocate(false)
	return rtp, err
}

// AllocatePair is Allocate that also binds the odd port above for RTCP.
// Release the RTCP socket before the RTP one.
func (p *PortPool) AllocatePair() (rtp, rtcp *net.UDPConn, err error) {
	return p.allocate(true)
}

func (p *PortPool) allocate(pair bool) (*net.UDPConn, *net.UDPConn, error) {
	var conn, rtcp *net.UDPConn
	_, err := p.take(func(port int) error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.bindIP, uint16(port))))
		if err != nil {
			return err
		}
		if pair {
			rtcp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.bindIP, uint16(port+1))))
			if err != nil {
				c.Close()
				return err
			}
		}
		conn = c
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return conn, rtcp, nil
}

// take hands out the first free port that bind succeeds on; a port bind
// fails on rests for a quarantine before it is tried again. The port is
// reserved under the pool's lock and bound without it, so allocations of
// concurrent calls do not wait on each other's system calls. bind must not
// call back into the pool.
func (p *PortPool) take(bind func(port int) error) (int, error) {
	var lastErr error
	budget := -1 // tries left: the free ports at the first look
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, ErrClosed
		}
		p.wakeLocked(p.now())
		if budget < 0 {
			budget = len(p.free)
		}
		if budget == 0 || len(p.free) == 0 {
			inUse, resting := len(p.inUse), len(p.resting)
			p.mu.Unlock()
			p.exhausted.Add(1)
			if lastErr != nil {
				p.log.Warn("rtp ports exhausted", "min", p.min, "max", p.max, "err", lastErr)
				return 0, fmt.Errorf("%w (last bind error: %v)", ErrPortsExhausted, lastErr)
			}
			p.log.Warn("rtp ports exhausted", "min", p.min, "max", p.max, "in_use", inUse, "quarantined", resting)
			return 0, ErrPortsExhausted
		}
		if p.maxInUse > 0 && len(p.inUse) >= p.maxInUse {
			inUse := len(p.inUse)
			p.mu.Unlock()
			p.exhausted.Add(1)
			p.log.Warn("rtp ports exhausted", "min", p.min, "max", p.max, "in_use", inUse, "max_in_use", p.maxInUse)
			return 0, ErrPortsExhausted
		}
		budget--
		port := p.free[0]
		p.free = p.free[1:]
		p.inUse[port] = struct{}{} // reserved while it is bound
		p.mu.Unlock()

		err := bind(port)
		if err == nil {
			return port, nil
		}
		lastErr = err
		p.mu.Lock()
		delete(p.inUse, port)
		p.resting = append(p.resting, quarantined{port: port, until: p.now().Add(p.quarantine)})
		p.mu.Unlock()
	}
}

// Exhausted counts allocations refused because no port could be bound.
func (p *PortPool) Exhausted() uint64 { return p.exhausted.Load() }

// Release closes conn and puts its port into quarantine. Releasing a socket
// the pool did not hand out, such as the RTCP socket of AllocatePair, only
// closes it.
func (p *PortPool) Release(conn *net.UDPConn) {
	if conn == nil {
		return
	}
	port := int(conn.LocalAddr().(*net.UDPAddr).AddrPort().Port())
	_ = conn.Close()
	p.release(port)
}

// release puts a port whose sockets are closed into quarantine; a port
// the pool did not hand out is ignored.
func (p *PortPool) release(port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.inUse[port]; !ok {
		return
	}
	delete(p.inUse, port)
	if p.quarantine == 0 {
		p.free = append(p.free, port)
		return
	}
	p.resting = append(p.resting, quarantined{port: port, until: p.now().Add(p.quarantine)})
}

// Close stops the pool from handing out more ports. Sockets already handed
// out stay open until released.
func (p *PortPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}
