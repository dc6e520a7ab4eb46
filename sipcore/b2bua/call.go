package b2bua

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
)

// MediaAccess exposes a call's media to recording, voicemail and music on
// hold.
type MediaAccess struct {
	Session *rtpcore.Session
	Caller  *rtpcore.Leg // the caller's RTP leg
	Callee  *rtpcore.Leg // the answering leg; nil before answer
	// PayloadType is the first negotiated codec's payload type.
	PayloadType uint8
}

// Call is one call: the caller's dialog, the forked legs and the media.
type Call struct {
	m   *Manager
	id  CallID
	log *slog.Logger
	// dialogKeys are the Manager's dialog-table keys that were ever
	// pointed at this call (guarded by Manager.mu), so removing the call
	// touches only its own entries.
	dialogKeys []string

	caller   *sipgo.DialogServerSession
	callerEP sipcore.Endpoint
	callerTx sip.ServerTransaction
	// wait is how the call, once answered and up, waits for its end.
	wait   endWait
	invite *sip.Request

	session    *rtpcore.Session
	callerLeg  *rtpcore.Leg
	callerOrig *sdp.Origin
	callerSDP  *sdp.Description // latest offer/answer from the caller
	codecs     []sdp.Codec      // negotiated with the caller; guarded by mu once answered
	lateOffer  bool             // the INVITE had no SDP: the offer goes in the 2xx
	mediaAddr  netip.Addr
	hops       int // Max-Forwards for the legs

	endCh    chan string // end requests (hangup, media timeout, remote BYE)
	endOnce  sync.Once
	dtmfStop func() // removes the DTMF taps (startDTMF); guarded by mu
	legCh    chan legEvent
	forkDone chan struct{} // closed when the fork no longer reads legCh
	forkOnce sync.Once

	reinvite sync.Mutex // one re-INVITE at a time
	// transferJobs hands a REFER's transfer to the goroutine that serves
	// the answered call (transfer.go, endwait.go); mediaKept keeps the
	// media open past the end for an attended transfer's joined party.
	transferJobs chan transferJob
	mediaKept    atomic.Bool
	done         chan struct{} // closed when the call has ended

	callerTimer sessionTimer // the caller side's session timer (RFC 4028)
	hold        holdState    // music on hold (moh.go)
	dtmfOut     sync.Mutex   // one generated DTMF event at a time

	ackMu sync.Mutex
	acks  map[ackKey]chan *sip.Request // 2xx the PBX sent, waiting for their ACK
	evMu  sync.Mutex                   // serialises observer calls

	mu         sync.Mutex
	info       CallInfo
	target     *Target
	legs       []*outLeg
	claimed    *outLeg // the leg whose 2xx won
	forkClosed bool    // no leg may win any more
	winner     *outLeg
	byeBy      *outLeg // side that sent BYE (nil with byeCaller false: none)
	byeCaller  bool

	app atomic.Pointer[appRun] // a local application answered the call (app_call.go)
}

// closeFork stops legs from winning or reporting.
func (c *Call) closeFork() {
	c.mu.Lock()
	c.forkClosed = true
	c.mu.Unlock()
	c.forkOnce.Do(func() { close(c.forkDone) })
}

// Info returns a snapshot of the call.
func (c *Call) Info() CallInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotLocked()
}

func (c *Call) snapshotLocked() CallInfo {
	in := c.info
	in.Digits = slices.Clone(c.info.Digits)
	in.Legs = make([]LegInfo, 0, len(c.legs))
	for _, l := range c.legs {
		in.Legs = append(in.Legs, l.info)
	}
	return in
}

// ID returns the call id.
func (c *Call) ID() CallID { return c.id }

// Media returns the call's media session and legs (taps attach here).
func (c *Call) Media() MediaAccess {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mediaLocked()
}

func (c *Call) mediaLocked() MediaAccess {
	ma := MediaAccess{Session: c.session, Caller: c.callerLeg}
	if c.winner != nil {
		ma.Callee = c.winner.media
	}
	if len(c.codecs) > 0 {
		ma.PayloadType = c.codecs[0].PayloadType
	}
	return ma
}

// event delivers one event to the observer. Events of one call are
// serialised (legs report from their own goroutines).
func (c *Call) event(kind EventKind, leg *LegInfo) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	c.mu.Lock()
	ev := Event{Kind: kind, At: time.Now(), Call: c.snapshotLocked(), Leg: leg}
	if kind == EventCreated || kind == EventAnswered {
		ev.Media = c.mediaLocked()
	}
	c.mu.Unlock()
	c.m.observe(ev)
}

// requestEnd asks the call to end; the first reason wins.
func (c *Call) requestEnd(reason string) {
	select {
	case c.endCh <- reason:
		c.wake()
	default:
	}
}

func hasToTag(req *sip.Request) bool {
	to := req.To()
	if to == nil {
		return false
	}
	_, ok := to.Params.Get("tag")
	return ok
}

func respond(tx sip.ServerTransaction, req *sip.Request, code int, reason string) {
	_ = tx.Respond(sip.NewResponseFromRequest(req, code, reason, nil))
}

// challengeAckWait bounds awaitAck: RFC 3261's default T1, by when the
// challenge is retransmitted.
const challengeAckWait = 500 * time.Millisecond

// awaitAck waits, on the handler's goroutine, for the ACK of the non-2xx
// final response just sent on tx, up to T1 (or tx's end). The transaction
// hands that ACK to a reader of Acks and, with none, parks a goroutine on
// it until Timer I (5 s on UDP): with every call challenged, thousands of
// goroutines for the collector to scan. An ACK later than T1 (the 407 is
// then being retransmitted) still gets one.
func awaitAck(tx sip.ServerTransaction) {
	t := time.NewTimer(challengeAckWait)
	defer t.Stop()
	select {
	case <-tx.Acks():
	case <-tx.Done():
	case <-t.C:
	}
}

func srcOf(req *sip.Request) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(req.Source())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func localOf(req *sip.Request) netip.AddrPort {
	if req.Laddr.IP == nil {
		return netip.AddrPort{}
	}
	ip, ok := netip.AddrFromSlice(req.Laddr.IP)
	if !ok {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(req.Laddr.Port))
}

// handleInvite runs a new call on the INVITE's goroutine until it is
// answered and confirmed by the caller's ACK, or over; an answered call then
// waits for its end with no goroutine (see endWait), and the handler
// returns: sipgo then lets the INVITE's transaction linger for its timers
// (UDP) or ends it (TCP), neither of which touches a confirmed dialog. It
// also relays a re-INVITE (admitInvite).
func (m *Manager) handleInvite(req *sip.Request, tx sip.ServerTransaction) {
	c, src, transport := m.admitInvite(req, tx)
	if c == nil {
		return
	}
	m.addDialog(c.caller.ID, dialogRef{call: c})
	c.run(req, src, transport)
	if c.wait.settle != nil {
		// Answered and up: the call waits for its end with no goroutine
		// (see endWait), and this handler returns.
		c.armEnd()
		return
	}
	c.ended()
}

// ended reports the call's end and lets it go: the last step of a call,
// on its goroutine.
func (c *Call) ended() {
	c.emitEnded()
	c.m.removeCall(c)
	c.caller.Close()
}

// admitInvite answers a request that does not start a call (a re-INVITE,
// an unsupported extension, a challenge, a refusal) and returns nil;
// otherwise it returns the new call, added to the Manager, its caller's
// dialog to be closed by the caller of admitInvite.
func (m *Manager) admitInvite(req *sip.Request, tx sip.ServerTransaction) (*Call, netip.AddrPort, string) {
	if tags := sipcore.UnsupportedRequire(req); len(tags) > 0 {
		// RFC 3261 section 8.2.2.3 (and RFC 3262 section 3 for 100rel):
		// an extension the PBX lacks is refused before anything else.
		m.log.Debug("invite requires unsupported extensions", "require", tags, "source", req.Source())
		_ = tx.Respond(tagInitial(req, sipcore.BadExtension(req, tags)))
		return nil, netip.AddrPort{}, ""
	}
	if res := m.tooSmall(req); res != nil {
		// RFC 4028 section 9: a session interval below the PBX's minimum
		// is refused with 422 and Min-SE, before anything else.
		_ = tx.Respond(tagInitial(req, res))
		return nil, netip.AddrPort{}, ""
	}
	if hasToTag(req) {
		m.handleReInvite(req, tx)
		return nil, netip.AddrPort{}, ""
	}
	if m.retransmittedInvite(req) {
		// Its call goes on; nothing answers a retransmission the
		// transaction would have absorbed (RFC 6026 7.1).
		tx.Terminate()
		return nil, netip.AddrPort{}, ""
	}
	src := srcOf(req)
	var caller Caller
	trusted := false
	if m.opts.Identify != nil {
		var rej *Rejection
		caller, trusted, rej = m.opts.Identify(req, src)
		if rej != nil {
			respond(tx, req, rej.Status, sipcore.Phrase(rej.Status))
			return nil, netip.AddrPort{}, ""
		}
	}
	if !trusted {
		if m.opts.Auth == nil {
			respond(tx, req, sip.StatusForbidden, "Forbidden")
			return nil, netip.AddrPort{}, ""
		}
		from := req.From()
		if from == nil {
			respond(tx, req, sip.StatusBadRequest, "Bad Request")
			return nil, netip.AddrPort{}, ""
		}
		realm := registrar.RealmFor(m.opts.Auth.Directory(), from.Address.Host, req.Recipient.Host)
		res := m.opts.Auth.Check(req, true, realm)
		if res.Outcome != registrar.Authorized {
			if res.Outcome == registrar.Rejected && m.opts.OnAuthFailure != nil {
				m.opts.OnAuthFailure(src, realm, res.Username)
			}
			_ = tx.Respond(tagInitial(req, m.opts.Auth.Response(req, res, true, realm)))
			awaitAck(tx)
			return nil, netip.AddrPort{}, ""
		}
		if m.opts.OnAuthSuccess != nil && !m.opts.OnAuthSuccess(src, realm, res.Username) {
			respond(tx, req, sip.StatusForbidden, "Forbidden")
			return nil, netip.AddrPort{}, ""
		}
		a := res.Account
		caller = Caller{Kind: KindEndpoint, Tenant: a.Tenant, Username: a.Username, Extension: a.Extension, DisplayName: a.DisplayName}
	}
	if req.Contact() == nil || req.From() == nil || req.To() == nil || req.CallID() == nil {
		respond(tx, req, sip.StatusBadRequest, "Bad Request")
		return nil, netip.AddrPort{}, ""
	}
	hops := 70
	if mf := req.MaxForwards(); mf != nil {
		hops = int(mf.Val())
	}
	if hops <= 1 {
		// A loop (a contact pointing back at the PBX) ends here.
		respond(tx, req, sip.StatusTooManyHops, "Too Many Hops")
		return nil, netip.AddrPort{}, ""
	}
	transport := strings.ToLower(req.Transport())
	ep, err := m.sip.EndpointForLocal(transport, localOf(req))
	if err != nil {
		respond(tx, req, sip.StatusServiceUnavailable, "Service Unavailable")
		return nil, netip.AddrPort{}, ""
	}
	dua := &sipgo.DialogUA{Client: ep.Client, ContactHDR: ep.Contact, RewriteContact: rewriteContact(req, transport)}
	ds, err := dua.ReadInvite(req, tx)
	if err == nil {
		err = m.adoptInitialToTag(req, ds)
	}
	if err != nil {
		respond(tx, req, sip.StatusBadRequest, "Bad Request")
		return nil, netip.AddrPort{}, ""
	}

	now := time.Now()
	c := &Call{
		m: m, id: NewCallID(now), caller: ds, callerEP: ep, callerTx: tx, invite: req, hops: hops - 1,
		endCh: make(chan string, 1), legCh: make(chan legEvent, 16), forkDone: make(chan struct{}), done: make(chan struct{}),
		transferJobs: make(chan transferJob, 1),
	}
	from := req.From()
	c.info = CallInfo{
		ID: c.id, SIPCallID: string(*req.CallID()), DialogID: ds.ID,
		From: from.Address.User, FromName: from.DisplayName, To: req.Recipient.User,
		Source: src.String(), Caller: caller, Tenant: caller.Tenant, State: StateRouting, Start: now,
	}
	if c.info.To == "" {
		if to := req.To(); to != nil {
			c.info.To = to.Address.User
		}
	}
	c.log = m.log.With("call", string(c.id), "sip_call_id", c.info.SIPCallID)
	if !m.addCall(c) {
		_ = ds.Respond(sip.StatusServiceUnavailable, "Service Unavailable", nil)
		ds.Close()
		return nil, netip.AddrPort{}, ""
	}
	return c, src, transport
}

// rewriteContact: send in-dialog requests to the packet source instead of
// the Contact over TCP (the caller's connection) and when the Contact
// reveals NAT.
func rewriteContact(req *sip.Request, transport string) bool {
	if transport != sipcore.TransportUDP {
		return true
	}
	ct := req.Contact()
	if ct == nil {
		return true
	}
	src := srcOf(req)
	ip, err := netip.ParseAddr(ct.Address.Host)
	if err != nil {
		return true
	}
	if src.Addr().IsPrivate() || src.Addr().IsLoopback() {
		return false
	}
	port := ct.Address.Port
	if port == 0 {
		port = 5060
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)) != src
}

// fail answers the caller with a final error before answer and ends the
// call record.
//
// The call ends when the final response is sent. The response goes
// through the transaction, not the dialog: the dialog's Respond returns
// only once the caller ACKed it (or Timer H gave up after 64*T1), which
// must neither lengthen the record nor keep the call live. The
// transaction absorbs the ACK (RFC 3261 section 17.2.1).
func (c *Call) fail(status int, cause calls.Cause, reason string) {
	at := time.Now()
	if err := c.callerTx.Respond(tagInitial(c.invite, sip.NewResponseFromRequest(c.invite, status, sipcore.Phrase(status), nil))); err != nil {
		c.log.Debug("final response to caller", "status", status, "err", err)
	}
	c.finishAt(at, cause, status, reason)
}

// finish records how the call ended (the first call wins) and releases
// its media. The ended event follows from emitEnded once every leg is done.
func (c *Call) finish(cause calls.Cause, status int, reason string) {
	c.finishAt(time.Now(), cause, status, reason)
}

// finishAt is finish with the end time given.
func (c *Call) finishAt(now time.Time, cause calls.Cause, status int, reason string) {
	c.endOnce.Do(func() {
		c.mu.Lock()
		if w := c.winner; w != nil && w.info.End.IsZero() {
			w.info.End = now
		}
		c.info.State = StateEnded
		c.info.End = now
		c.info.Cause = cause
		c.info.SIPStatus = status
		c.info.Reason = reason
		c.mu.Unlock()
		close(c.done)
		c.stopTimers()
		c.stopDTMF()
		if c.session != nil && !c.mediaKept.Load() {
			_ = c.session.Close()
		}
		c.log.Info("call ended", "cause", cause, "sip_status", status, "reason", reason)
	})
}

// emitEnded delivers the winner's leg event and the ended event, after
// every leg has finished, so the record lists each leg's outcome.
func (c *Call) emitEnded() {
	c.finish(calls.CauseError, sip.StatusInternalServerError, "call ended without outcome")
	c.mu.Lock()
	var wl *LegInfo
	if w := c.winner; w != nil {
		li := w.info
		wl = &li
	}
	c.mu.Unlock()
	if wl != nil {
		c.event(EventLegEnded, wl)
	}
	c.event(EventEnded, nil)
}

func (c *Call) run(req *sip.Request, src netip.AddrPort, transport string) {
	_ = c.caller.Respond(sip.StatusTrying, "Trying", nil)
	var offer *sdp.Description
	if len(req.Body()) == 0 {
		// A late offer (RFC 3261 section 13.2.1): the PBX offers in its
		// 2xx and the caller answers in the ACK. The callees are offered
		// every configured codec meanwhile.
		c.lateOffer = true
		c.codecs = c.m.opts.Codecs
	} else {
		var err error
		if offer, err = sdp.Parse(req.Body()); err != nil {
			c.event(EventCreated, nil)
			c.fail(sip.StatusNotAcceptableHere, calls.CauseFailed, "bad sdp offer")
			return
		}
		codecs, err := sdp.Negotiate(offer, c.m.opts.Codecs)
		if err != nil {
			c.event(EventCreated, nil)
			c.fail(sip.StatusNotAcceptableHere, calls.CauseFailed, "no common codec")
			return
		}
		c.codecs, c.callerSDP = codecs, offer
	}
	if rep := req.GetHeader("Replaces"); rep != nil {
		c.runReplaces(rep.Value(), offer) // replaces.go
		return
	}

	from := req.From()
	in := &Inbound{
		ID: c.id, SIPCallID: c.info.SIPCallID, Caller: c.info.Caller,
		From: from.Address, FromName: from.DisplayName, To: req.To().Address, RequestURI: req.Recipient,
		Source: src, Transport: transport, Request: req,
	}
	dec := c.m.opts.Router.Route(c.caller.Context(), in)
	if dec.Target != nil {
		mt := dec.Target.Meta
		c.mu.Lock()
		if mt.Tenant != "" {
			c.info.Tenant = mt.Tenant
		}
		c.info.Direction, c.info.Extension, c.info.DID, c.info.Trunk, c.info.Meta = mt.Direction, mt.Extension, mt.DID, mt.Trunk, mt
		c.mu.Unlock()
	}
	if dec.Reject != nil || dec.Target == nil {
		rej := dec.Reject
		if rej == nil {
			rej = &Rejection{Status: sip.StatusNotFound, Cause: calls.CauseNoRoute}
		}
		c.event(EventCreated, nil)
		reason := string(rej.Cause)
		if rej.Err != nil {
			reason = rej.Err.Error()
			c.log.Info("call rejected", "status", rej.Status, "cause", rej.Cause, "err", rej.Err)
		}
		c.fail(rej.Status, rej.Cause, reason)
		return
	}
	target := dec.Target
	if c.caller.Context().Err() != nil {
		c.event(EventCreated, nil)
		c.finish(calls.CauseCancelled, sip.StatusRequestTerminated, "caller cancelled")
		return
	}

	c.mediaAddr = c.m.opts.Media.AdvertisedAddr()
	if !c.mediaAddr.IsValid() || c.mediaAddr.IsUnspecified() {
		if ip, err := netip.ParseAddr(strings.Trim(c.callerEP.Host, "[]")); err == nil {
			c.mediaAddr = ip
		} else {
			c.mediaAddr = netip.MustParseAddr("127.0.0.1")
		}
	}
	sess, err := c.m.opts.Media.NewSession(rtpcore.SessionOptions{
		ID:        string(c.id),
		OnTimeout: func(*rtpcore.Session, time.Duration) { c.requestEnd("media timeout") },
	})
	if err == nil {
		c.session = sess
		c.callerLeg, err = sess.NewLeg("caller")
	}
	if err != nil {
		c.log.Warn("media session", "err", err)
		c.event(EventCreated, nil)
		c.fail(sip.StatusServiceUnavailable, calls.CauseError, "no media ports")
		return
	}
	c.callerLeg.ApplySDP(offer)
	c.callerOrig = sdp.NewOrigin()
	c.callerOrig.Username = c.m.sip.UserAgent()

	c.event(EventCreated, nil)
	c.place(target) // next.go
}
