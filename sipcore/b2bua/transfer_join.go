package b2bua

import (
	"context"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
)

// dialRound is one transfer's set of new legs, raced like the call's own
// fork: the first 2xx wins.
type dialRound struct {
	target  *Target
	ch      chan legEvent
	done    chan struct{}
	once    sync.Once
	claimed *outLeg // guarded by call.mu
	closed  bool    // guarded by call.mu
}

func (r *dialRound) close(c *Call) {
	c.mu.Lock()
	r.closed = true
	c.mu.Unlock()
	r.once.Do(func() { close(r.done) })
}

// dialTransfer rings a transfer's target and returns the leg that answered,
// or nil and the status for the final NOTIFY. The transferee hanging up
// or the call being ended stops it. When the target rings the transferor
// is told (NOTIFY 180, as Asterisk does) and the transferee hears the
// target's early media, if it sends any.
func (c *Call) dialTransfer(x *transfer, job transferJob, target *Target) (*outLeg, int) {
	ring := target.RingTimeout
	if ring <= 0 {
		ring = c.m.opts.RingTimeout
	}
	r := &dialRound{target: target, ch: make(chan legEvent, 16), done: make(chan struct{})}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer r.close(c)
	var legs []*outLeg
	for _, lt := range target.Legs {
		c.mu.Lock()
		i := len(c.legs)
		c.mu.Unlock()
		l, err := c.newLeg(i, lt, target, ring)
		if err != nil {
			c.log.Warn("transfer leg not started", "target", lt.Name, "err", err)
			continue
		}
		l.round = r
		c.mu.Lock()
		c.legs = append(c.legs, l)
		c.mu.Unlock()
		legs = append(legs, l)
		wg.Add(1)
		go func() { defer wg.Done(); l.run() }()
	}
	cancelAll := func(except *outLeg) {
		for _, l := range legs {
			if l != except {
				l.cancel()
			}
		}
	}
	timer := time.NewTimer(ring)
	defer timer.Stop()
	// The 180 NOTIFY goes out while the legs ring on; the final one must
	// not overtake it.
	var notified sync.WaitGroup
	defer notified.Wait()
	ringing, early := false, false
	var finals []int
	for pending := len(legs); pending > 0; {
		select {
		case ev := <-r.ch:
			switch ev.kind {
			case legProgress:
				if !ringing {
					ringing = true
					notified.Add(1)
					go func() { defer notified.Done(); job.notify(sip.StatusRinging, false) }()
				}
				if ev.sdp != nil && !early {
					early = true
					if err := rtpcore.Bridge(x.a.media(), ev.leg.media); err != nil {
						c.log.Debug("transfer early media", "err", err)
					}
				}
			case legAnswered:
				r.close(c)
				cancelAll(ev.leg)
				if ev.sdp != nil {
					ev.leg.media.ApplySDP(ev.sdp)
				}
				return ev.leg, sip.StatusOK
			case legFailed:
				pending--
				finals = append(finals, ev.status)
			}
		case <-timer.C:
			cancelAll(nil)
			return nil, sip.StatusRequestTimeout
		case <-x.a.done():
			cancelAll(nil)
			return nil, sip.StatusRequestTerminated
		case why := <-c.endCh:
			c.log.Info("transfer abandoned", "reason", why)
			cancelAll(nil)
			x.a.hangup()
			return nil, sip.StatusRequestTerminated
		}
	}
	status, _ := bestFailure(finals)
	return nil, status
}

// runJoined relays the transfer's two parties until either hangs up or the
// call is ended, and returns the call record's reason.
func (c *Call) runJoined(x *transfer) string {
	defer close(x.done)
	x.register()
	if x.held.valid() {
		x.resume(x.held)
	}
	var reason string
	select {
	case why := <-c.endCh:
		reason = why
		switch {
		case why != "bye":
		case x.a.ended():
			reason = "transferee hung up"
		case x.b.ended():
			reason = "transfer target hung up"
		}
	case <-x.a.done():
		reason = "transferee hung up"
	case <-x.b.done():
		reason = "transfer target hung up"
	}
	var wg sync.WaitGroup
	for _, p := range []party{x.a, x.b} {
		wg.Add(1)
		go func() { defer wg.Done(); p.hangup() }()
	}
	wg.Wait()
	for _, p := range []party{x.a, x.b, x.transferor} {
		p.markEnded()
		p.stopTimer()
	}
	return reason
}

// register routes the joined parties' in-dialog requests to the
// transfer.
func (x *transfer) register() {
	m := x.owner.m
	m.addDialog(x.a.dialogID(), dialogRef{call: x.owner, leg: x.a.leg, xfer: x, side: 0})
	m.addDialog(x.b.dialogID(), dialogRef{call: x.owner, leg: x.b.leg, xfer: x, side: 1})
}

// resume takes the transferee off hold when the transferor held it
// before transferring (as phones do for an attended transfer): the new
// party must be heard. A failure is logged; the call goes on.
func (x *transfer) resume(p party) {
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	defer cancel()
	x.reinvite.Lock()
	defer x.reinvite.Unlock()
	offer := p.origin().Offer(p.c.mediaAddr, p.media().Port(), x.codecs, "")
	status, ans, err := p.reinvite(ctx, offer)
	if err != nil || status/100 != 2 {
		x.owner.log.Debug("transferee not resumed", "status", status, "err", err)
		return
	}
	if ans != nil {
		p.media().ApplySDP(ans)
	}
	p.c.setHoldState(false)
}

// transferRequest handles an in-dialog request for a dialog a transfer
// took over; it reports false when the request is not the transfer's.
func (m *Manager) transferRequest(ref dialogRef, req *sip.Request, tx sip.ServerTransaction) bool {
	x := ref.xfer
	if x == nil {
		return false
	}
	if ref.side < 0 {
		// The transferor, detached: it may only hang up.
		if req.Method == sip.BYE {
			x.transferor.readBye(req, tx)
			x.transferor.markEnded()
		} else if req.Method != sip.ACK {
			respond(tx, req, sip.StatusNotAcceptableHere, "Not Acceptable Here")
		}
		return true
	}
	from, to := x.side(ref.side), x.side(1-ref.side)
	switch req.Method {
	case sip.ACK:
	case sip.BYE:
		from.readBye(req, tx)
	case sip.INVITE:
		x.relayReInvite(from, to, req, tx)
	case sip.UPDATE:
		// A session refresh (RFC 4028 section 9); an offer in UPDATE is
		// taken only to hold and resume with music on hold, as on any call.
		if res := m.tooSmall(req); res != nil {
			_ = tx.Respond(res)
			return true
		}
		if len(req.Body()) > 0 {
			x.holdUpdate(from, req, tx)
			return true
		}
		res := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)
		from.c.refreshed(from.leg, req, res)
		_ = tx.Respond(res)
	case sip.INFO:
		if len(req.Body()) == 0 {
			respond(tx, req, sip.StatusOK, "OK")
			return true
		}
		r := sip.NewRequest(sip.INFO, to.remoteURI())
		if ct := req.ContentType(); ct != nil {
			r.AppendHeader(sip.NewHeader("Content-Type", ct.Value()))
		}
		r.SetBody(req.Body())
		ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
		defer cancel()
		res, err := to.do(ctx, r)
		status := sip.StatusRequestTimeout
		if err == nil {
			status = res.StatusCode
		}
		respond(tx, req, status, sipcore.Phrase(status))
	default:
		return false
	}
	return true
}

// relayReInvite passes a joined party's re-INVITE (hold, resume) to the
// other party, as the call's own relay does.
func (x *transfer) relayReInvite(from, to party, req *sip.Request, tx sip.ServerTransaction) {
	plain := func(code int) { respond(tx, req, code, sipcore.Phrase(code)) }
	if err := from.readRequest(req, tx); err != nil {
		plain(sip.StatusInternalServerError)
		return
	}
	if !x.reinvite.TryLock() {
		plain(sip.StatusRequestPending)
		return
	}
	defer x.reinvite.Unlock()
	ep := from.endpoint()
	if len(req.Body()) == 0 {
		res := sdpResponse(req, from.origin().Offer(from.c.mediaAddr, from.media().Port(), x.codecs, ""), ep.Contact)
		from.c.refreshed(from.leg, req, res)
		_ = tx.Respond(res)
		return
	}
	if res, ok := x.holdPair().holdOffer(req, x.sideOf(from)); ok {
		// Music on hold (moh.go): answered here, not passed on.
		from.c.refreshed(from.leg, req, res)
		_ = tx.Respond(res)
		return
	}
	offer, err := sdp.Parse(req.Body())
	if err != nil {
		plain(sip.StatusNotAcceptableHere)
		return
	}
	common, err := sdp.Negotiate(offer, x.codecs)
	if err != nil {
		plain(sip.StatusNotAcceptableHere)
		return
	}
	from.media().ApplySDP(offer)
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	defer cancel()
	status, answer, err := to.reinvite(ctx, to.origin().Offer(to.c.mediaAddr, to.media().Port(), common, offer.Direction))
	if err != nil {
		plain(sip.StatusServiceUnavailable)
		return
	}
	if status/100 != 2 {
		plain(status)
		return
	}
	dir, codecs := sdp.Direction(""), common
	if answer != nil {
		to.media().ApplySDP(answer)
		dir = answer.Direction
		if len(answer.Codecs) > 0 {
			codecs = answer.Codecs
		}
	}
	body, _, err := from.origin().Answer(offer, from.c.mediaAddr, from.media().Port(), codecs, dir)
	if err != nil {
		plain(sip.StatusNotAcceptableHere)
		return
	}
	x.owner.setHoldState(offer.Hold() || (answer != nil && answer.Hold()))
	res := sdpResponse(req, body, ep.Contact)
	from.c.refreshed(from.leg, req, res) // a re-INVITE refreshes the session (RFC 4028)
	_ = tx.Respond(res)
}
