package b2bua

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore/sdp"
	"pbx/sipcore"
)

var errNoAnswer = errors.New("no answer to re-invite")

// callerAckGrace bounds the wait for the caller's ACK before its
// re-INVITE is handled.
const callerAckGrace = 2 * time.Second

func (m *Manager) handleAck(req *sip.Request, tx sip.ServerTransaction) {
	ref, ok := m.lookupDialog(req)
	if !ok || m.transferRequest(ref, req, tx) {
		return
	}
	delivered := ref.call.deliverAck(ref.leg, req)
	if ref.leg != nil || delivered && req.CSeq().SeqNo != ref.call.invite.CSeq().SeqNo {
		return
	}
	if err := ref.call.caller.ReadAck(req, tx); err != nil {
		m.log.Debug("ack does not match the dialog", "err", err)
	}
}

func (m *Manager) handleBye(req *sip.Request, tx sip.ServerTransaction) {
	ref, ok := m.lookupDialog(req)
	if !ok {
		respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
		return
	}
	if m.transferRequest(ref, req, tx) {
		return
	}
	c := ref.call
	c.markBye(ref.leg)
	var err error
	if ref.leg == nil {
		err = c.caller.ReadBye(req, tx)
	} else if d := ref.leg.dialog; d != nil {
		err = d.ReadBye(req, tx)
	}
	if err != nil {
		c.log.Debug("bye", "err", err)
		respond(tx, req, sip.StatusOK, "OK")
	}
}

func (m *Manager) handleCancel(req *sip.Request, tx sip.ServerTransaction) {
	// Matched CANCELs are answered by the transaction layer.
	respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
}

// handleInDialog answers INFO, UPDATE and in-dialog OPTIONS.
func (m *Manager) handleInDialog(req *sip.Request, tx sip.ServerTransaction) {
	if !hasToTag(req) {
		respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
		return
	}
	ref, ok := m.lookupDialog(req)
	if !ok {
		respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
		return
	}
	if m.transferRequest(ref, req, tx) {
		return
	}
	if req.Method == sip.INFO && len(req.Body()) > 0 {
		// DTMF (application/dtmf-relay, application/dtmf) is interworked;
		// anything else is relayed to the other side, its answer passed
		// back.
		status := ref.call.handleInfo(req, ref.leg == nil)
		respond(tx, req, status, sipcore.Phrase(status))
		return
	}
	if req.Method == sip.UPDATE && len(req.Body()) > 0 {
		// An offer in UPDATE is taken only to hold and resume with music
		// on hold (moh.go); it is not relayed.
		if res := ref.call.holdUpdate(m, req, ref.leg); res != nil {
			_ = tx.Respond(res)
			return
		}
		respond(tx, req, sip.StatusNotAcceptableHere, "Not Acceptable Here")
		return
	}
	if req.Method == sip.UPDATE {
		if res := m.tooSmall(req); res != nil {
			_ = tx.Respond(res)
			return
		}
	}
	res := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)
	if req.Method == sip.UPDATE {
		// A session refresh without SDP (RFC 4028 section 9).
		ref.call.refreshed(ref.leg, req, res)
	}
	if req.Method == sip.OPTIONS {
		res.AppendHeader(sip.NewHeader("Allow", m.sip.Allow()))
		res.AppendHeader(sip.NewHeader("Accept", "application/sdp"))
	}
	_ = tx.Respond(res)
}

// handleReInvite relays a re-INVITE (hold, resume, refresh) to the other
// side of the call with the PBX's SDP, direction preserved, and answers with
// the PBX's SDP reflecting the other side's answer.
func (m *Manager) handleReInvite(req *sip.Request, tx sip.ServerTransaction) {
	ref, ok := m.lookupDialog(req)
	if !ok {
		respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
		return
	}
	if m.transferRequest(ref, req, tx) {
		return
	}
	c := ref.call
	var err error
	if ref.leg == nil {
		if !c.awaitCallerAck() {
			// The caller's ACK to the initial 2xx is still outstanding (or
			// overtaken by this re-INVITE on another goroutine): taking the
			// re-INVITE's CSeq now would make that ACK look stale.
			respond(tx, req, sip.StatusRequestPending, sipcore.Phrase(sip.StatusRequestPending))
			return
		}
		err = c.caller.ReadRequest(req, tx)
	} else {
		err = ref.leg.dialog.ReadRequest(req, tx)
	}
	if err != nil {
		res := sip.NewResponseFromRequest(req, sip.StatusInternalServerError, "Server Internal Error", nil)
		res.AppendHeader(sip.NewHeader("Retry-After", "1"))
		_ = tx.Respond(res)
		return
	}
	if ref.leg == nil && c.localApp() != nil {
		c.localReInvite(req, tx) // app_call.go
		return
	}
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	if w == nil || !c.reinvite.TryLock() {
		respond(tx, req, sip.StatusRequestPending, "Request Pending")
		return
	}
	from := 0
	if ref.leg != nil {
		from = 1
	}
	res, local := c.holdPair(w).holdOffer(req, from)
	if !local {
		res = c.relayReInvite(req, ref.leg == nil, w)
	}
	// No longer pending once the answer is decided: a follow-up re-INVITE
	// racing this response must not get 491.
	c.reinvite.Unlock()
	if !res.IsSuccess() {
		if err := tx.Respond(res); err != nil {
			c.log.Debug("answer re-invite", "err", err)
		}
		return
	}
	c.refreshed(ref.leg, req, res)
	ack := c.respond2xx(tx, ref.leg, res)
	if ack == nil {
		select {
		case <-c.done:
		default:
			c.log.Warn("no ack for the 2xx to a re-invite", "from_caller", ref.leg == nil)
			c.requestEnd("no ack for re-invite answer")
		}
		return
	}
	if len(req.Body()) == 0 {
		c.applyAckAnswer(ack, ref.leg == nil, w)
	}
}

// applyAckAnswer takes the SDP answer of the ACK completing a re-INVITE
// without offer (the PBX offered in its 2xx, RFC 3264 section 5 via RFC
// 3261 section 14.2) and points the sender's media leg at it.
func (c *Call) applyAckAnswer(ack *sip.Request, fromCaller bool, w *outLeg) {
	if len(ack.Body()) == 0 {
		c.log.Debug("ack without the answer to the re-invite offer")
		return
	}
	ans, err := sdp.Parse(ack.Body())
	if err != nil {
		c.log.Info("bad sdp answer in ack", "err", err)
		return
	}
	media := c.callerLeg
	if !fromCaller {
		media = w.media
	}
	media.ApplySDP(ans)
	if c.m.opts.MusicOnHold != nil {
		side := 0
		if !fromCaller {
			side = 1
		}
		c.holdPair(w).setHold(side, ans.Hold())
		return
	}
	c.setHoldState(ans.Hold())
}

// awaitCallerAck waits a moment for the caller's dialog to be confirmed by
// the ACK of the initial 2xx, and reports whether it is.
func (c *Call) awaitCallerAck() bool {
	deadline := time.Now().Add(callerAckGrace)
	for {
		switch c.caller.LoadState() {
		case sip.DialogStateConfirmed:
			return true
		case sip.DialogStateEnded:
			return false
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-c.done:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// relayReInvite passes the re-INVITE req to the other side and returns the
// answer for its sender.
func (c *Call) relayReInvite(req *sip.Request, fromCaller bool, w *outLeg) *sip.Response {
	fromMedia, fromOrigin, toMedia, toOrigin := c.callerLeg, c.callerOrig, w.media, w.origin
	ep := c.callerEP
	if !fromCaller {
		fromMedia, fromOrigin, toMedia, toOrigin = w.media, w.origin, c.callerLeg, c.callerOrig
		ep = w.ep
	}
	plain := func(code int) *sip.Response { return sip.NewResponseFromRequest(req, code, sipcore.Phrase(code), nil) }

	if len(req.Body()) == 0 {
		// A refresh without offer: offer our current description; the
		// answer in the ACK changes nothing we relay.
		return sdpResponse(req, fromOrigin.Offer(c.mediaAddr, fromMedia.Port(), c.negotiated(), ""), ep.Contact)
	}
	offer, err := sdp.Parse(req.Body())
	if err != nil {
		return plain(sip.StatusNotAcceptableHere)
	}
	common, err := sdp.Negotiate(offer, c.negotiated())
	if err != nil {
		return plain(sip.StatusNotAcceptableHere)
	}
	fromMedia.ApplySDP(offer)

	relayOffer := toOrigin.Offer(c.mediaAddr, toMedia.Port(), common, offer.Direction)
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	defer cancel()
	status, answer, err := c.sendReInvite(ctx, !fromCaller, w, relayOffer)
	if err != nil {
		c.log.Warn("re-invite not relayed", "err", err)
		return plain(sip.StatusServiceUnavailable)
	}
	if status < 200 || status > 299 {
		return plain(status)
	}
	dir := sdp.Direction("")
	codecs := common
	if answer != nil {
		toMedia.ApplySDP(answer)
		dir = answer.Direction
		if len(answer.Codecs) > 0 {
			codecs = answer.Codecs
		}
	}
	body, _, err := fromOrigin.Answer(offer, c.mediaAddr, fromMedia.Port(), codecs, dir)
	if err != nil {
		return plain(sip.StatusNotAcceptableHere)
	}
	c.setHoldState(offer.Hold() || (answer != nil && answer.Hold()))
	return sdpResponse(req, body, ep.Contact)
}

func sdpResponse(req *sip.Request, body []byte, contact sip.ContactHeader) *sip.Response {
	res := sip.NewSDPResponseFromRequest(req, body)
	res.AppendHeader(sip.HeaderClone(&contact))
	return res
}

// sendReInvite sends a re-INVITE with body to the caller (toCaller) or to
// the winning leg, ACKs a 2xx and returns the final status and answer.
func (c *Call) sendReInvite(ctx context.Context, toCaller bool, w *outLeg, body []byte) (int, *sdp.Description, error) {
	var res *sip.Response
	var err error
	var uri sip.Uri
	if toCaller {
		uri = c.caller.InviteRequest.Contact().Address
		req := c.newInDialogInvite(uri, body)
		c.addRefreshHeaders(nil, req)
		res, err = c.caller.Do(ctx, req)
		if err == nil && res.IsSuccess() {
			ack := sip.NewRequest(sip.ACK, uri)
			if werr := c.caller.WriteRequest(ack); werr != nil {
				c.log.Debug("ack re-invite", "err", werr)
			}
		}
	} else {
		d := w.dialog
		uri = d.InviteRequest.Recipient
		if ct := d.InviteResponse.Contact(); ct != nil {
			uri = ct.Address
		}
		req := c.newInDialogInvite(uri, body)
		if w.target.Destination.IsValid() {
			req.SetDestination(w.target.Destination.String())
		}
		c.addRefreshHeaders(w, req)
		res, err = d.Do(ctx, req)
		if err == nil && res.IsSuccess() {
			ack := sip.NewRequest(sip.ACK, uri)
			if w.target.Destination.IsValid() {
				ack.SetDestination(w.target.Destination.String())
			}
			if werr := d.WriteAck(ctx, ack); werr != nil {
				c.log.Debug("ack re-invite", "err", werr)
			}
		}
	}
	if err != nil {
		return 0, nil, err
	}
	if res == nil {
		return 0, nil, errNoAnswer
	}
	if !res.IsSuccess() {
		return res.StatusCode, nil, nil
	}
	side := w
	if toCaller {
		side = nil
	}
	c.refreshAnswered(side, res)
	ans, perr := sdp.Parse(res.Body())
	if perr != nil {
		return res.StatusCode, nil, fmt.Errorf("answer sdp: %w", perr)
	}
	return res.StatusCode, ans, nil
}

func (c *Call) newInDialogInvite(uri sip.Uri, body []byte) *sip.Request {
	req := sip.NewRequest(sip.INVITE, uri)
	c.m.sip.DecorateRequest(req)
	req.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
	req.SetBody(body)
	return req
}

// handleInfo answers an INFO with a body from one side of an answered
// call: DTMF is interworked (dtmf.go); anything else, and DTMF the other
// far end takes as INFO only, is relayed to the other side, whose answer
// is returned.
func (c *Call) handleInfo(req *sip.Request, fromCaller bool) int {
	if a := c.localApp(); a != nil && fromCaller {
		return c.localInfo(a, req) // app_call.go
	}
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	if w == nil || w.dialog == nil {
		return sip.StatusOK
	}
	if c.infoDTMF(req, fromCaller, w) {
		return sip.StatusOK
	}
	ct, body := "", req.Body()
	if h := req.ContentType(); h != nil {
		ct = h.Value()
		if d, dur, ok := parseDTMFInfo(ct, body); ok {
			// DTMF goes on in the form most phones take (dtmf-relay).
			ct, body = ctDTMFRelay, dtmfRelayBody(d, dur)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	defer cancel()
	status, err := c.sendInfo(ctx, !fromCaller, w, ct, body)
	if err != nil {
		c.log.Debug("info not relayed", "err", err)
		return sip.StatusRequestTimeout
	}
	return status
}

// sendInfo sends an INFO with body of content type ct to the caller
// (toCaller) or to the winning leg w and returns the final status.
func (c *Call) sendInfo(ctx context.Context, toCaller bool, w *outLeg, ct string, body []byte) (int, error) {
	var uri sip.Uri
	info := func() *sip.Request {
		r := sip.NewRequest(sip.INFO, uri)
		c.m.sip.DecorateRequest(r)
		if ct != "" {
			r.AppendHeader(sip.NewHeader("Content-Type", ct))
		}
		r.SetBody(body)
		return r
	}
	var res *sip.Response
	var err error
	if !toCaller {
		d := w.dialog
		uri = d.InviteRequest.Recipient
		if ct := d.InviteResponse.Contact(); ct != nil {
			uri = ct.Address
		}
		r := info()
		if w.target.Destination.IsValid() {
			r.SetDestination(w.target.Destination.String())
		}
		res, err = d.Do(ctx, r)
	} else {
		uri = c.caller.InviteRequest.Contact().Address
		res, err = c.caller.Do(ctx, info())
	}
	if err != nil {
		return 0, err
	}
	return res.StatusCode, nil
}
