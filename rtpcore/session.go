package rtpcore

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// SessionOptions configures one call's media session.
type SessionOptions struct {
	// ID names the session in logs and statistics (the call id).
	ID string
	// MediaTimeout, when positive, calls OnTimeout once after no packet has
	// arrived on any leg of the session for that long. Until the first
	// packet, silence is measured from the session's creation.
	MediaTimeout time.Duration
	// OnTimeout is called on its own goroutine with the silence so far.
	OnTimeout func(s *Session, idle time.Duration)
}

// Session is the media of one call: a set of legs, at most pairs of them
// bridged. It is safe for concurrent use.
type Session struct {
	e       *Engine
	id      string
	log     *slog.Logger
	created time.Time

	mu        sync.Mutex
	last      int64 // engine mono time of creation, or of the last packet of a leg gone since (see lastMono)
	legs      []*Leg
	closed    bool
	timeout   time.Duration
	onTimeout func(*Session, time.Duration)
	timer     *time.Timer
	fired     bool
	armedAt   int64 // engine mono time of the last SetMediaTimeout
}

// NewSession opens a media session. It allocates no port until NewLeg.
func (e *Engine) NewSession(opts SessionOptions) (*Session, error) {
	now := time.Now()
	s := &Session{
		e:         e,
		id:        opts.ID,
		log:       e.log.With("call", opts.ID),
		created:   now,
		onTimeout: opts.OnTimeout,
	}
	s.last = e.mono(now)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.sessions[s] = struct{}{}
	e.mu.Unlock()
	s.SetMediaTimeout(opts.MediaTimeout)
	return s, nil
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// NewLeg allocates a port and starts a leg reading from it. name is for
// logs and statistics ("caller", "callee-1", ...).
func (s *Session) NewLeg(name string) (*Leg, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.mu.Unlock()
	conn, rtcp, err := s.e.openSocks()
	if err != nil {
		return nil, fmt.Errorf("leg %s: %w", name, err)
	}
	l := newLeg(s, name, conn, rtcp)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.e.closeSocks(conn, rtcp)
		return nil, ErrClosed
	}
	if err := l.startIO(); err != nil {
		s.e.closeSocks(conn, rtcp)
		return nil, fmt.Errorf("leg %s: %w", name, err)
	}
	s.legs = append(s.legs, l)
	s.e.legsCreated.Add(1)
	return l, nil
}

// Legs returns the session's open legs in creation order.
func (s *Session) Legs() []*Leg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Leg(nil), s.legs...)
}

func (s *Session) legCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.legs)
}

func (s *Session) dropLeg(l *Leg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.legs {
		if x == l {
			s.legs = append(s.legs[:i], s.legs[i+1:]...)
			s.last = max(s.last, l.lastPacket.Load())
			return
		}
	}
}

// Bridge relays RTP both ways between a and b, legs of this session.
// Either leg's previous partner is unbridged first. See the package
// function Bridge to join legs of different sessions.
func (s *Session) Bridge(a, b *Leg) error {
	if a == nil || b == nil || a.sess != s || b.sess != s {
		return ErrForeignLeg
	}
	return Bridge(a, b)
}

// Unbridge stops relaying to and from l.
func (s *Session) Unbridge(l *Leg) { l.Unbridge() }

// LastPacket is when the last packet arrived on any leg (the session's
// creation time before the first packet).
func (s *Session) LastPacket() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e.epoch.Add(time.Duration(s.lastMono()))
}

// Idle is how long no packet has arrived on any leg of the session.
func (s *Session) Idle() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.e.mono(time.Now()) - s.lastMono())
}

// lastMono is the engine mono time of the last packet on any leg, or of
// the session's creation before the first; called with s.mu held. Each
// leg keeps its own (Leg.lastPacket) so that a packet does not touch the
// session's memory too; a leg leaving folds its own into s.last.
func (s *Session) lastMono() int64 {
	last := s.last
	for _, l := range s.legs {
		last = max(last, l.lastMono())
	}
	return last
}

// SetMediaTimeout changes the silence after which OnTimeout is called;
// zero or negative disables it (for example while a call is on hold).
// Silence is counted from the last packet or from this call, whichever is
// later, so re-arming on resume after a long hold does not fire at once.
// The callback fires at most once per arming.
func (s *Session) SetMediaTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.timeout = d
	s.fired = false
	s.armedAt = s.e.mono(time.Now())
	if d <= 0 || s.closed || s.onTimeout == nil {
		return
	}
	s.timer = time.AfterFunc(d, s.checkTimeout)
}

// silence is how long the session has been silent since it was armed;
// called with s.mu held.
func (s *Session) silence() time.Duration {
	since := max(s.lastMono(), s.armedAt)
	return time.Duration(s.e.mono(time.Now()) - since)
}

func (s *Session) checkTimeout() {
	s.mu.Lock()
	if s.closed || s.fired || s.timeout <= 0 || s.timer == nil {
		s.mu.Unlock()
		return
	}
	idle := s.silence()
	if idle < s.timeout {
		s.timer.Reset(s.timeout - idle)
		s.mu.Unlock()
		return
	}
	s.fired = true
	fn := s.onTimeout
	s.mu.Unlock()
	s.log.Warn("media timeout", "idle", idle)
	fn(s, idle)
}

// SessionStats are a session's counters.
type SessionStats struct {
	ID      string
	Created time.Time
	Idle    time.Duration
	Legs    []LegStats
}

// Stats returns the session's counters and those of its open legs.
func (s *Session) Stats() SessionStats {
	st := SessionStats{ID: s.id, Created: s.created, Idle: s.Idle()}
	for _, l := range s.Legs() {
		st.Legs = append(st.Legs, l.Stats())
	}
	return st
}

// Close closes every leg and releases their ports. It is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	legs := append([]*Leg(nil), s.legs...)
	s.mu.Unlock()
	for _, l := range legs {
		_ = l.Close()
	}
	s.e.remove(s)
	return nil
}
