package b2bua

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
	"pbx/sipcore/registrar"
)

// Defaults of Options.
const (
	DefaultRingTimeout = 30 * time.Second
	// byeTimeout bounds one BYE transaction at teardown.
	byeTimeout = 10 * time.Second
	// reinviteTimeout bounds relaying one re-INVITE.
	reinviteTimeout = 20 * time.Second
)

// Options configures a Manager.
type Options struct {
	SIP      *sipcore.Server // required
	Media    *rtpcore.Engine // required
	Auth     *registrar.Auth // required unless Identify trusts every caller
	Router   Router          // required
	Codecs   []sdp.Codec     // the configured codecs; empty means sdp.DefaultCodecs
	Observer Observer        // may be nil
	Identify IdentifyFunc    // may be nil: every new INVITE is challenged

	// RingTimeout applies when a Target names none. Default 30s.
	RingTimeout time.Duration
	// MediaTimeout ends an answered call whose RTP stopped in both
	// directions for this long; 0 disables.
	MediaTimeout time.Duration
	// MinSE is the shortest session interval (RFC 4028) the PBX accepts;
	// shorter requests get 422. Default DefaultMinSE (90 s, the RFC's
	// floor); tests set less.
	MinSE time.Duration
	// SessionExpires is the session interval the PBX asks of callees,
	// raised to MinSE. Default DefaultSessionExpires.
	SessionExpires time.Duration
	// FailoverAfter is how long an INVITE to a leg's destination may get
	// no response at all before its next alternate is tried. Default
	// DefaultFailoverAfter.
	FailoverAfter time.Duration

	// MusicOnHold, when set, answers a party's hold itself and plays its
	// music to the held party instead of passing the hold on (moh.go);
	// nil relays holds to the other party.
	MusicOnHold MusicOnHold

	// OnAuthFailure, when set, is called for an INVITE with wrong
	// credentials. It must be quick.
	OnAuthFailure func(src netip.AddrPort, domain, username string)
	// OnAuthSuccess, when set, is called for an INVITE with valid
	// credentials before the call is placed; false refuses it with 403
	// Forbidden. It must be quick.
	OnAuthSuccess func(src netip.AddrPort, domain, username string) bool
}

// Manager runs the calls of one SIP server.
type Manager struct {
	log  *slog.Logger
	opts Options
	sip  *sipcore.Server

	mu      sync.Mutex
	calls   map[CallID]*Call
	dialogs map[string]dialogRef
	closed  bool

	wg sync.WaitGroup // live calls and background BYEs

	// t1 and t2 pace the retransmission of a 2xx the PBX answers a
	// re-INVITE with (RFC 3261 section 13.3.1.4), and 64*t1 bounds the
	// wait for the ACK of any 2xx it sends; sipgo's T1 and T2.
	t1, t2 time.Duration
}

// dialogRef points from a SIP dialog id to a call side.
type dialogRef struct {
	call *Call
	leg  *outLeg // nil: the caller side
	// xfer is set once a transfer took the dialog over; side is its
	// party (0 transferee, 1 new party, -1 the detached transferor).
	xfer *transfer
	side int
}

// New builds a Manager and registers its handlers (INVITE, ACK, BYE,
// CANCEL, INFO, UPDATE, in-dialog OPTIONS, REFER, and the unhandled-response hook
// that re-ACKs retransmitted 2xx) on the SIP server.
func New(opts Options, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.SIP == nil || opts.Media == nil || opts.Router == nil {
		return nil, fmt.Errorf("%w: SIP, Media and Router are required", ErrInvalidOptions)
	}
	if opts.Auth == nil && opts.Identify == nil {
		return nil, fmt.Errorf("%w: Auth or Identify is required", ErrInvalidOptions)
	}
	if len(opts.Codecs) == 0 {
		opts.Codecs = sdp.DefaultCodecs
	}
	if opts.RingTimeout <= 0 {
		opts.RingTimeout = DefaultRingTimeout
	}
	if opts.MinSE <= 0 {
		opts.MinSE = DefaultMinSE
	}
	if opts.SessionExpires <= 0 {
		opts.SessionExpires = DefaultSessionExpires
	}
	opts.SessionExpires = max(opts.SessionExpires, opts.MinSE)
	if opts.FailoverAfter <= 0 {
		opts.FailoverAfter = DefaultFailoverAfter
	}
	m := &Manager{
		log: log, opts: opts, sip: opts.SIP,
		calls:   map[CallID]*Call{},
		dialogs: map[string]dialogRef{},
		t1:      sip.T1, t2: sip.T2,
	}
	s := opts.SIP
	s.Handle(sip.INVITE, m.handleInvite)
	s.Handle(sip.ACK, m.handleAck)
	s.Handle(sip.BYE, m.handleBye)
	s.Handle(sip.CANCEL, m.handleCancel)
	s.Handle(sip.INFO, m.handleInDialog)
	s.Handle(sip.UPDATE, m.handleInDialog)
	s.Handle(sip.OPTIONS, m.handleInDialog)
	s.Handle(sip.REFER, m.handleRefer)
	s.OnUnhandledResponse(m.handleUnhandledResponse)
	s.SetDialogLookup(func(req *sip.Request) bool {
		_, ok := m.lookupDialog(req)
		return ok
	})
	return m, nil
}

func (m *Manager) observe(ev Event) {
	if m.opts.Observer != nil {
		m.opts.Observer.CallEvent(ev)
	}
}

func (m *Manager) addCall(c *Call) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.calls[c.id] = c
	m.wg.Add(1)
	return true
}

func (m *Manager) removeCall(c *Call) {
	m.mu.Lock()
	delete(m.calls, c.id)
	// Only the call's own keys: walking every dialog here cost a few per
	// cent of CPU at high call rates, growing with the live calls.
	for _, k := range c.dialogKeys {
		if r, ok := m.dialogs[k]; ok && r.call == c {
			delete(m.dialogs, k)
		}
	}
	c.dialogKeys = nil
	m.mu.Unlock()
	m.wg.Done()
}

func (m *Manager) addDialog(id string, ref dialogRef) {
	if id == "" {
		return
	}
	m.mu.Lock()
	m.dialogs[id] = ref
	ref.call.dialogKeys = append(ref.call.dialogKeys, id)
	m.mu.Unlock()
}

// lookupDialog finds the call side of an in-dialog request.
func (m *Manager) lookupDialog(req *sip.Request) (dialogRef, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, err := sip.DialogIDFromRequestUAS(req); err == nil {
		if r, ok := m.dialogs[id]; ok && r.leg == nil {
			return r, true
		}
	}
	if id, err := sip.DialogIDFromRequestUAC(req); err == nil {
		if r, ok := m.dialogs[id]; ok && r.leg != nil {
			return r, true
		}
	}
	return dialogRef{}, false
}

// Calls returns a snapshot of the live calls, oldest first. A call that
// handed its party over to an attended transfer is over, though its media
// lives on in the joined call: it is not listed.
func (m *Manager) Calls() []CallInfo {
	m.mu.Lock()
	cs := make([]*Call, 0, len(m.calls))
	for _, c := range m.calls {
		if !c.mediaKept.Load() {
			cs = append(cs, c)
		}
	}
	m.mu.Unlock()
	out := make([]CallInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Info())
	}
	slices.SortFunc(out, func(a, b CallInfo) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Call returns the live call id.
func (m *Manager) Call(id CallID) (*Call, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.calls[id]
	return c, ok
}

// Hangup ends call id: BYE to both sides (or, before answer, the legs are
// cancelled and the caller gets 480). It returns at once; the signalling
// happens in the background, on the goroutine the request wakes (see
// endWait) once the call is answered; Close waits for the call to end.
func (m *Manager) Hangup(id CallID) error { return m.End(id, "hangup") }

// End is Hangup with the reason the call record gives.
func (m *Manager) End(id CallID, reason string) error {
	c, ok := m.Call(id)
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoSuchCall, id)
	}
	c.requestEnd(reason)
	return nil
}

// Active returns the number of live calls.
func (m *Manager) Active() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls)
}

// Close refuses new calls, hangs up every live call and waits for their
// signalling to finish or ctx to end.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	cs := make([]*Call, 0, len(m.calls))
	for _, c := range m.calls {
		cs = append(cs, c)
	}
	m.mu.Unlock()
	for _, c := range cs {
		c.requestEnd("shutdown")
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close calls: %w", ctx.Err())
	}
}

// WaitIdle waits until no call is live or ctx ends (drain).
func (m *Manager) WaitIdle(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for m.Active() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// handleUnhandledResponse re-ACKs a retransmitted 2xx to an INVITE or
// re-INVITE the PBX sent, on either side of a call, whose client
// transaction has ended (the ACK was lost).
func (m *Manager) handleUnhandledResponse(res *sip.Response) {
	if !res.IsSuccess() {
		return
	}
	cseq := res.CSeq()
	if cseq == nil || cseq.MethodName != sip.INVITE {
		return
	}
	callID, from, to := res.CallID(), res.From(), res.To()
	if callID == nil || from == nil || to == nil {
		return
	}
	fromTag, _ := from.Params.Get("tag")
	toTag, _ := to.Params.Get("tag")
	m.mu.Lock()
	// A leg's dialog (the PBX is UAC) is keyed as sipgo keys the 2xx; the
	// caller's (the PBX is UAS) has the tags the other way round.
	ref, ok := m.dialogs[sip.DialogIDMake(string(*callID), toTag, fromTag)]
	if !ok || ref.leg == nil {
		ref, ok = m.dialogs[sip.DialogIDMake(string(*callID), fromTag, toTag)]
		ok = ok && ref.leg == nil
	}
	m.mu.Unlock()
	if ok {
		ref.call.reack(ref.leg, res)
	}
}
