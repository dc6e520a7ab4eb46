package b2bua

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
	"pbx/sipcore/calls"
)

const (
	// appGrace bounds the wait for App.Run to return once the call ended
	// without it (the caller hung up, Hangup, media timeout).
	appGrace = 2 * time.Second
	// defaultAppName names an App's leg whose Target has no Name.
	defaultAppName = "app"
	// appDigits is the capacity of Channel.Digits.
	appDigits = 32
)

// appRun is a local application answering a call: its channel and the
// state the SIP handlers share with it.
type appRun struct {
	leg    *outLeg // carries the leg's LegInfo (kind KindLocal); no dialog, no media
	digits chan rune
	hidden atomic.Bool // HideDigits: digits no longer go on the record
}

// localApp returns the call's local application, or nil.
func (c *Call) localApp() *appRun { return c.app.Load() }

// g711 keeps the G.711 codecs of list, the ones a Channel codes.
func g711(list []sdp.Codec) []sdp.Codec {
	var out []sdp.Codec
	for _, cd := range list {
		if cd.Same(sdp.PCMA) || cd.Same(sdp.PCMU) {
			out = append(out, cd)
		}
	}
	return out
}

// runApp answers the caller locally with the caller leg's own SDP and runs
// target.App on it until either side hangs up (app.go).
func (c *Call) runApp(target *Target) {
	name := target.Name
	if name == "" {
		name = defaultAppName
	}
	c.mu.Lock()
	c.target = target
	c.mu.Unlock()
	codecs := g711(c.m.opts.Codecs)
	var body []byte
	var ackCh chan *sip.Request
	if c.lateOffer {
		body = c.callerOrig.Offer(c.mediaAddr, c.callerLeg.Port(), codecs, "")
		cseq := c.invite.CSeq().SeqNo
		ackCh = c.expectAck(nil, cseq)
		defer c.dropAckWait(nil, cseq)
	} else {
		var err error
		body, codecs, err = c.callerOrig.Answer(c.callerSDP, c.mediaAddr, c.callerLeg.Port(), g711(c.negotiated()), "")
		if err != nil {
			c.fail(sip.StatusNotAcceptableHere, calls.CauseFailed, "no common codec")
			return
		}
	}
	if len(codecs) == 0 {
		c.fail(sip.StatusNotAcceptableHere, calls.CauseFailed, "no common codec")
		return
	}
	now := time.Now()
	a := &appRun{digits: make(chan rune, appDigits)}
	a.leg = &outLeg{call: c, info: LegInfo{Target: name, Kind: KindLocal, Start: now, Answer: now, SIPStatus: sip.StatusOK, Won: true, Cause: calls.CauseAnswered}}
	c.mu.Lock()
	c.legs = append(c.legs, a.leg)
	c.codecs = codecs
	c.info.State = StateAnswered
	c.info.Answer = now
	li := a.leg.info
	c.mu.Unlock()
	// From here in-dialog INFO and re-INVITEs are the application's
	// (indialog.go).
	c.app.Store(a)

	c.event(EventAnswered, &li)
	c.log.Info("call answered locally", "app", name)
	hdrs := append([]sip.Header{sip.NewHeader("Content-Type", "application/sdp")}, c.negotiateCaller(body)...)
	if err := c.confirmAnswer(body, hdrs); err != nil {
		reason := "no ack from caller"
		c.mu.Lock()
		if c.byeCaller {
			reason = "caller hung up"
		}
		c.mu.Unlock()
		c.endApp(a, calls.CauseAnswered, reason)
		return
	}
	if c.lateOffer && !c.takeAckAnswer(ackCh, codecs) {
		c.hangupCaller()
		c.endApp(a, calls.CauseFailed, "no acceptable sdp answer in ack")
		return
	}
	if c.m.opts.MediaTimeout > 0 {
		c.session.SetMediaTimeout(c.m.opts.MediaTimeout)
	}
	c.armTimer(nil)
	c.startAppDTMF(a)
	c.driveApp(target.App, a)
}

// driveApp runs app on its own goroutine and waits for the call's end:
// Run returning hangs up (BYE); the caller's BYE, Hangup, a media timeout
// or a session timer cancel Run's context, and Run is awaited for appGrace.
func (c *Call) driveApp(app App, a *appRun) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := newAppChannel(c, a, c.negotiated()[0].PayloadType)
	ch.startPacer(ctx)
	ret := make(chan calls.Cause, 1)
	c.m.wg.Add(1)
	go func() {
		defer c.m.wg.Done()
		cause := calls.CauseError
		defer func() {
			if r := recover(); r != nil {
				c.log.Error("local application panicked", "panic", fmt.Sprint(r))
			}
			ret <- cause
		}()
		cause = app.Run(ctx, ch)
		if cause == "" {
			cause = calls.CauseAnswered
		}
	}()
	cause, reason, returned := calls.CauseAnswered, "", false
	select {
	case reason = <-c.endCh:
	case <-c.caller.Context().Done():
		reason = "caller hung up"
	case cause = <-ret:
		returned = true
		reason = "application hung up"
	}
	cancel()
	c.mu.Lock()
	byCaller := c.byeCaller
	c.mu.Unlock()
	if byCaller {
		reason = "caller hung up"
	} else {
		c.hangupCaller()
	}
	if !returned {
		cause = calls.CauseAnswered
	}
	c.endApp(a, cause, reason)
	if !returned {
		t := time.NewTimer(appGrace)
		defer t.Stop()
		select {
		case <-ret:
		case <-t.C:
			c.log.Warn("local application still running after the call ended")
		}
	}
}

// endApp ends an application's call: its leg's end, the call's outcome
// and the leg's event (the ended event follows from emitEnded).
func (c *Call) endApp(a *appRun, cause calls.Cause, reason string) {
	c.mu.Lock()
	if a.leg.info.End.IsZero() {
		a.leg.info.End = time.Now()
	}
	li := a.leg.info
	c.mu.Unlock()
	status := sip.StatusOK
	if cause == calls.CauseFailed {
		status = sip.StatusNotAcceptableHere
	}
	c.finish(cause, status, reason)
	c.event(EventLegEnded, &li)
}

// appDigit records a digit of the caller (unless hidden) and hands it to
// the application; a full Digits buffer drops it.
func (c *Call) appDigit(a *appRun, d rune, at time.Time, via string) {
	if !a.hidden.Load() {
		c.addDigit(d, at, via)
	}
	select {
	case a.digits <- d:
	default:
		c.log.Debug("application digit dropped: buffer full", "digit", string(d))
	}
}

// startAppDTMF taps the caller's leg for RFC 4733 events (one digit per
// key press, end-of-event retransmissions ignored) until the call ends.
func (c *Call) startAppDTMF(a *appRun) {
	ch := make(chan dtmfIn, dtmfQueue)
	leg := c.callerLeg
	det := rtpcore.NewDTMFDetector(0)
	remove := leg.AddTap(rtpcore.TapFunc(func(p *rtpcore.Packet) {
		if p.Dir != rtpcore.In {
			return
		}
		pt := leg.TelephoneEventPT()
		if pt < 0 {
			return
		}
		det.SetPayloadType(uint8(pt))
		if d, ok := det.Feed(&p.Header, p.Payload()); ok {
			select {
			case ch <- dtmfIn{fromCaller: true, digit: d, at: p.At}:
			default:
			}
		}
	}))
	c.m.wg.Add(1)
	go func() {
		defer c.m.wg.Done()
		defer remove()
		for {
			select {
			case <-c.done:
				return
			case in := <-ch:
				c.appDigit(a, in.digit, in.at, DigitViaRTP)
			}
		}
	}()
}

// localInfo answers an INFO from the caller of an application's call:
// DTMF goes to the application; anything else is accepted and ignored.
func (c *Call) localInfo(a *appRun, req *sip.Request) int {
	if ct := req.ContentType(); ct != nil {
		if d, _, ok := parseDTMFInfo(ct.Value(), req.Body()); ok {
			c.appDigit(a, d, time.Now(), DigitViaINFO)
		}
	}
	return sip.StatusOK
}

// localReInvite answers the caller's re-INVITE (hold, resume, refresh) on
// an application's call itself: 200 with the PBX's SDP, the direction
// mirrored (RFC 3264 section 6.1), or the PBX's offer when the re-INVITE
// had none (the answer comes in the ACK). The application goes on.
func (c *Call) localReInvite(req *sip.Request, tx sip.ServerTransaction) {
	if !c.reinvite.TryLock() {
		respond(tx, req, sip.StatusRequestPending, sipcore.Phrase(sip.StatusRequestPending))
		return
	}
	res := c.localReInviteAnswer(req)
	c.reinvite.Unlock()
	if !res.IsSuccess() {
		_ = tx.Respond(res)
		return
	}
	c.refreshed(nil, req, res)
	ack := c.respond2xx(tx, nil, res)
	if ack == nil {
		select {
		case <-c.done:
		default:
			c.log.Warn("no ack for the 2xx to a re-invite", "from_caller", true)
			c.requestEnd("no ack for re-invite answer")
		}
		return
	}
	if len(req.Body()) == 0 {
		c.applyAckAnswer(ack, true, nil)
	}
}

func (c *Call) localReInviteAnswer(req *sip.Request) *sip.Response {
	if len(req.Body()) == 0 {
		return sdpResponse(req, c.callerOrig.Offer(c.mediaAddr, c.callerLeg.Port(), c.negotiated(), ""), c.callerEP.Contact)
	}
	offer, err := sdp.Parse(req.Body())
	if err != nil {
		return sipcore.Response(req, sip.StatusNotAcceptableHere)
	}
	body, _, err := c.callerOrig.Answer(offer, c.mediaAddr, c.callerLeg.Port(), c.negotiated(), "")
	if err != nil {
		return sipcore.Response(req, sip.StatusNotAcceptableHere)
	}
	c.callerLeg.ApplySDP(offer)
	c.setHoldState(offer.Hold())
	return sdpResponse(req, body, c.callerEP.Contact)
}
