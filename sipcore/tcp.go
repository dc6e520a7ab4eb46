package sipcore

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// SIP over TCP meets hostile peers: a scanner that opens connections until
// the process runs out of descriptors, a slow sender that never finishes a
// message, a guesser the guard throttles. The TCP listeners hand sipgo a
// net.Listener (tcpListener) and connections (tcpConn, tcpframe.go) that
// hold the line before sipgo sees a byte:
//
//   - Accept never fails for anything but a closed listener: an error such
//     as EMFILE is counted and retried after a pause that doubles from 5 ms
//     to 1 s, as net/http's Server.Serve does.
//   - At most TCPOptions.MaxConnections accepted connections are open at
//     once, and at most MaxPerSource from one IPv4 address or IPv6 /64; the excess is
//     closed at once (with a reset, leaving no TIME_WAIT behind) and counted.
//   - Each connection is framed into whole SIP messages (RFC 3261 18.3)
//     with idle and incomplete-message deadlines, see tcpConn.
//
// What happens is counted (Server.TCPStats) and logged at most once per
// tcpLogEvery per kind, with the count since the previous line.

// Accept retry pauses, as net/http's Server.Serve.
const (
	acceptDelayMin = 5 * time.Millisecond
	acceptDelayMax = time.Second
)

// tcpLogEvery is the shortest interval between two log lines of one kind.
const tcpLogEvery = 5 * time.Second

// TCPStats counts what the SIP TCP listeners did since New.
type TCPStats struct {
	Open             int    // accepted connections open now
	Accepted         uint64 // connections accepted within the caps
	RefusedTotal     uint64 // closed on accept: MaxConnections were open
	RefusedSource    uint64 // closed on accept: MaxPerSource were open from that address
	AcceptErrors     uint64 // failed accepts (EMFILE, ENFILE, ...), each retried after a pause
	IdleClosed       uint64 // closed after IdleTimeout without a byte
	IncompleteClosed uint64 // closed with a message incomplete after MessageTimeout
	Oversize         uint64 // closed on a message above TCPMaxMessage
	Malformed        uint64 // closed on a message without a usable Content-Length
	Throttled        uint64 // closed because the admission hook refused a message
}

// tcpLimits is the state the TCP listeners of one Server share.
type tcpLimits struct {
	opts  TCPOptions
	admit Admitter

	mu     sync.Mutex
	open   int
	perSrc map[netip.Addr]int

	accepted, refusedTotal, refusedSource, acceptErrors atomic.Uint64
	idle, incomplete, oversize, malformed, throttled    atomic.Uint64

	refusedLog, acceptLog, closedLog *rateLog
}

func newTCPLimits(opts TCPOptions, admit Admitter, log *slog.Logger) *tcpLimits {
	l := &tcpLimits{opts: opts, admit: admit, perSrc: map[netip.Addr]int{}}
	l.refusedLog = &rateLog{log: log, level: slog.LevelWarn, msg: "sip tcp connections refused over the caps", attrs: l.logAttrs}
	l.acceptLog = &rateLog{log: log, level: slog.LevelError, msg: "sip tcp accept failed; retrying", attrs: l.logAttrs}
	l.closedLog = &rateLog{log: log, level: slog.LevelInfo, msg: "sip tcp connections closed", attrs: l.logAttrs}
	return l
}

func (l *tcpLimits) stats() TCPStats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return TCPStats{
		Open:             open,
		Accepted:         l.accepted.Load(),
		RefusedTotal:     l.refusedTotal.Load(),
		RefusedSource:    l.refusedSource.Load(),
		AcceptErrors:     l.acceptErrors.Load(),
		IdleClosed:       l.idle.Load(),
		IncompleteClosed: l.incomplete.Load(),
		Oversize:         l.oversize.Load(),
		Malformed:        l.malformed.Load(),
		Throttled:        l.throttled.Load(),
	}
}

func (l *tcpLimits) logAttrs() []any {
	s := l.stats()
	return []any{
		"open", s.Open, "refusedTotal", s.RefusedTotal, "refusedSource", s.RefusedSource,
		"acceptErrors", s.AcceptErrors, "idleClosed", s.IdleClosed, "incompleteClosed", s.IncompleteClosed,
		"oversize", s.Oversize, "malformed", s.Malformed, "throttled", s.Throttled,
		"maxConnections", l.opts.MaxConnections, "maxPerSource", l.opts.MaxPerSource,
	}
}

// stop ends the pending log flushes.
func (l *tcpLimits) stop() {
	l.refusedLog.stop()
	l.acceptLog.stop()
	l.closedLog.stop()
}

// sourceKey is what MaxPerSource counts by: the IPv4 address, or the /64
// of an IPv6 address (one host or one site holds a whole /64).
func sourceKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// take reserves a slot for a connection from src; false when a cap is
// reached (and counted).
func (l *tcpLimits) take(src netip.Addr) bool {
	src = sourceKey(src)
	l.mu.Lock()
	switch {
	case l.open >= l.opts.MaxConnections:
		l.mu.Unlock()
		l.refusedTotal.Add(1)
	case l.perSrc[src] >= l.opts.MaxPerSource:
		l.mu.Unlock()
		l.refusedSource.Add(1)
	default:
		l.open++
		l.perSrc[src]++
		l.mu.Unlock()
		l.accepted.Add(1)
		return true
	}
	l.refusedLog.add("lastSource", src.String())
	return false
}

// give returns the slot of a connection from src.
func (l *tcpLimits) give(src netip.Addr) {
	src = sourceKey(src)
	l.mu.Lock()
	l.open--
	if n := l.perSrc[src] - 1; n > 0 {
		l.perSrc[src] = n
	} else {
		delete(l.perSrc, src)
	}
	l.mu.Unlock()
}

// tcpListener is the net.Listener sipgo serves a TCP listener through.
type tcpListener struct {
	net.Listener
	limits    *tcpLimits
	done      chan struct{}
	closeOnce sync.Once
}

func newTCPListener(ln net.Listener, limits *tcpLimits) *tcpListener {
	return &tcpListener{Listener: ln, limits: limits, done: make(chan struct{})}
}

// Accept returns the next connection within the caps, framed. It returns an
// error only once the listener is closed: any other accept error is counted
// and retried after a pause.
func (l *tcpListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			delay = min(max(2*delay, acceptDelayMin), acceptDelayMax)
			l.limits.acceptErrors.Add(1)
			l.limits.acceptLog.add("err", err.Error(), "retryIn", delay.String())
			t := time.NewTimer(delay)
			select {
			case <-l.done:
				t.Stop()
				return nil, net.ErrClosed
			case <-t.C:
			}
			continue
		}
		delay = 0
		src := addrOf(c.RemoteAddr())
		if !l.limits.take(src.Addr()) {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		return newTCPConn(c, src, l.limits), nil
	}
}

// Close closes the socket and ends a pause between accept retries.
func (l *tcpListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// addrOf is a net.Addr as an unmapped netip.AddrPort.
func addrOf(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		if a != nil {
			ap, _ = netip.ParseAddrPort(a.String())
		}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// rateLog writes one line per kind of event at most every tcpLogEvery, with
// the number of events since the previous line; an event inside the
// interval is reported when it ends.
type rateLog struct {
	log   *slog.Logger
	level slog.Level
	msg   string
	attrs func() []any

	mu      sync.Mutex
	last    time.Time
	pending uint64
	extra   []any
	timer   *time.Timer
	stopped bool
}

// add records one event; extra attributes (the latest error) replace those
// of the previous event.
func (r *rateLog) add(extra ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending++
	if extra != nil {
		r.extra = extra
	}
	if r.stopped || r.timer != nil {
		return
	}
	if wait := tcpLogEvery - time.Since(r.last); wait > 0 {
		r.timer = time.AfterFunc(wait, r.flush)
		return
	}
	r.flushLocked()
}

func (r *rateLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if !r.stopped {
		r.flushLocked()
	}
}

func (r *rateLog) flushLocked() {
	if r.pending == 0 {
		return
	}
	args := append([]any{"count", r.pending}, r.extra...)
	r.pending, r.extra, r.last = 0, nil, time.Now()
	r.log.Log(context.Background(), r.level, r.msg, append(args, r.attrs()...)...)
}

func (r *rateLog) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}
