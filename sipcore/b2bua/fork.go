package b2bua

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore/sdp"
	"pbx/sipcore/calls"
)

// fork starts every leg and drives the call until it is answered, or
// fails. It returns the failure when every leg failed or the ring timer
// ran out (the caller is not answered yet: place decides, through
// Target.Next), nil otherwise: the call is over, or it is answered and up,
// and then c.wait.settle is set to what its end leaves to do (handleInvite
// arms the wait for that end: see endWait).
//
// An answered call used to wait for its end here, on the INVITE handler's
// goroutine, whose stack had grown to 8 or 16 kB setting the call up and
// shrinks only to a power of two above four times what its parked frames
// use (sipgo's, handleInvite, run, place, fork and the wait). Measured at
// 1,000 held calls (BenchmarkConcurrentCallsRelay with PBX_PPROF,
// runtime/metrics): goroutine stacks 11.0 MB with the wait there, 3.1 MB
// with a goroutine of its own per call, resident memory per call 59.2 kB
// (two runs) and 51.2.
func (c *Call) fork(target *Target) *dialFailure {
	legsWG := new(sync.WaitGroup)
	// The losing legs have been cancelled; wait for them before returning,
	// so the call's goroutine owns every leg until the end.
	settle := func() {
		c.closeFork()
		legsWG.Wait()
	}
	w, answerSDP, fail := c.ring(target, legsWG)
	if w == nil {
		settle()
		return fail
	}
	if c.answer(w, answerSDP) {
		c.wait.settle = settle
		return nil
	}
	settle()
	return nil
}

// ring starts every leg and waits for one to answer (it returns that leg
// and its SDP, the other legs cancelled), for all to fail or the ring timer
// (it returns the failure), or for the call to end before (all nil). Leg
// goroutines are counted in legsWG.
func (c *Call) ring(target *Target, legsWG *sync.WaitGroup) (*outLeg, *sdp.Description, *dialFailure) {
	ringTimeout := target.RingTimeout
	if ringTimeout <= 0 {
		ringTimeout = c.m.opts.RingTimeout
	}
	c.mu.Lock()
	c.target = target
	c.mu.Unlock()
	var startFailures []int
	c.mu.Lock()
	first := len(c.legs) // legs of an earlier dial (Target.Next) keep their numbers
	c.mu.Unlock()
	for i, lt := range target.Legs {
		l, err := c.newLeg(first+i, lt, target, ringTimeout)
		if err != nil {
			c.log.Warn("leg not started", "target", lt.Name, "err", err)
			now := time.Now()
			failed := &outLeg{info: LegInfo{Target: lt.Name, Kind: lt.Kind, Extension: lt.Extension, Start: now, End: now, SIPStatus: sip.StatusServiceUnavailable, Cause: calls.CauseError}}
			c.mu.Lock()
			c.legs = append(c.legs, failed)
			c.mu.Unlock()
			li := failed.info
			c.event(EventLegEnded, &li)
			startFailures = append(startFailures, sip.StatusServiceUnavailable)
			continue
		}
		c.mu.Lock()
		c.legs = append(c.legs, l)
		c.mu.Unlock()
		legsWG.Add(1)
		go func() {
			defer legsWG.Done()
			l.run()
		}()
	}
	pending := 0
	c.mu.Lock()
	for _, l := range c.legs {
		if l.cancel != nil {
			pending++
		}
	}
	c.mu.Unlock()

	cancelAll := func(except *outLeg) {
		c.mu.Lock()
		for _, l := range c.legs {
			if l != except && l.cancel != nil {
				l.cancel()
			}
		}
		c.mu.Unlock()
	}
	ring := time.NewTimer(ringTimeout)
	defer ring.Stop()
	ringing := false
	var early *outLeg
	finals := startFailures

	for pending > 0 {
		select {
		case ev := <-c.legCh:
			switch ev.kind {
			case legProgress:
				if ev.sdp != nil && early == nil && !c.lateOffer {
					// A late-offer caller cannot take early media: an
					// offer in an unreliable provisional is not allowed
					// (RFC 3261 section 13.2.1) and 100rel is not
					// supported; it hears its own ringback.
					early = ev.leg
					c.earlyMedia(ev)
				} else if !ringing {
					_ = c.caller.Respond(sip.StatusRinging, "Ringing", nil)
				}
				if !ringing {
					ringing = true
					c.mu.Lock()
					c.info.State = StateRinging
					c.mu.Unlock()
					c.event(EventRinging, nil)
				}
			case legAnswered:
				c.closeFork()
				cancelAll(ev.leg)
				return ev.leg, ev.sdp, nil
			case legFailed:
				pending--
				finals = append(finals, ev.status)
			}
		case <-ring.C:
			c.closeFork()
			cancelAll(nil)
			return nil, nil, c.dialFailed(target, Failure{Cause: calls.CauseNoAnswer, Status: sip.StatusTemporarilyUnavailable}, "ring timeout")
		case <-c.caller.Context().Done():
			c.closeFork()
			cancelAll(nil)
			c.finish(calls.CauseCancelled, sip.StatusRequestTerminated, "caller cancelled")
			return nil, nil, nil
		case why := <-c.endCh:
			c.closeFork()
			cancelAll(nil)
			c.fail(sip.StatusTemporarilyUnavailable, calls.CauseCancelled, why)
			return nil, nil, nil
		}
	}
	c.closeFork()
	status, cause := bestFailure(finals)
	return nil, nil, c.dialFailed(target, Failure{Cause: cause, Status: status}, "no leg answered")
}

// bestFailure picks the caller's final answer when every leg failed.
func bestFailure(finals []int) (int, calls.Cause) {
	if len(finals) == 0 {
		return sip.StatusTemporarilyUnavailable, calls.CauseNoAnswer
	}
	busy, decline := 0, false
	for _, s := range finals {
		switch s {
		case sip.StatusBusyHere, statusBusyEverywhere:
			busy++
		case statusDecline:
			decline = true
		}
	}
	switch {
	case busy == len(finals):
		return sip.StatusBusyHere, calls.CauseBusy
	case decline:
		return statusDecline, calls.CauseRejected
	case busy > 0:
		return sip.StatusBusyHere, calls.CauseBusy
	}
	for _, s := range finals {
		if s == sip.StatusRequestTimeout || s == sip.StatusTemporarilyUnavailable || s == sip.StatusRequestTerminated {
			return sip.StatusTemporarilyUnavailable, calls.CauseNoAnswer
		}
	}
	s := finals[0]
	if s < 400 || s > 699 || s == sip.StatusUnauthorized || s == sip.StatusProxyAuthRequired || s == statusSmall {
		// A callee's challenge, or its refusal of the session interval the
		// PBX asked (RFC 4028), is not the caller's to answer.
		s = sip.StatusTemporarilyUnavailable
	}
	return s, calls.CauseFailed
}

// answer connects the caller with the winning leg. It returns false when
// the caller could not be answered (the call is over).
func (c *Call) answer(w *outLeg, answerSDP *sdp.Description) bool {
	now := time.Now()
	c.mu.Lock()
	c.winner = w
	c.info.State = StateAnswered
	c.info.Answer = now
	c.info.AnsweredBy = w.target.Extension
	li := w.info
	c.mu.Unlock()

	if answerSDP != nil {
		w.media.ApplySDP(answerSDP)
	}
	if err := c.session.Bridge(c.callerLeg, w.media); err != nil {
		c.log.Warn("bridge", "err", err)
	}
	// Digits may follow the answer at once, before the caller's ACK.
	c.startDTMF(w)
	answerCodecs := c.codecs
	dir := sdp.Direction("")
	if answerSDP != nil && len(answerSDP.Codecs) > 0 {
		answerCodecs = answerSDP.Codecs
	}
	var body []byte
	var ackCh chan *sip.Request
	if c.lateOffer {
		body, answerCodecs = c.lateOfferBody(answerSDP)
		// Until the ACK's answer narrows them, the offered codecs are the
		// call's (the answered event's payload type comes from them).
		c.mu.Lock()
		c.codecs = answerCodecs
		c.mu.Unlock()
		ackCh = c.expectAck(nil, c.invite.CSeq().SeqNo)
		defer c.dropAckWait(nil, c.invite.CSeq().SeqNo)
	} else {
		var err error
		body, _, err = c.callerOrig.Answer(c.callerSDP, c.mediaAddr, c.callerLeg.Port(), answerCodecs, dir)
		if err != nil {
			body, _, err = c.callerOrig.Answer(c.callerSDP, c.mediaAddr, c.callerLeg.Port(), c.codecs, dir)
		}
		if err != nil {
			c.log.Warn("answer sdp", "err", err)
		}
	}
	// The call-record writer puts its marker down before the caller hears
	// the answer.
	c.event(EventAnswered, &li)
	c.log.Info("call answered", "by", w.target.Name)

	hdrs := append([]sip.Header{sip.NewHeader("Content-Type", "application/sdp")}, c.negotiateCaller(body)...)
	if err := c.confirmAnswer(body, hdrs); err != nil {
		c.mu.Lock()
		byCaller := c.byeCaller
		c.mu.Unlock()
		reason := "no ack from caller"
		if byCaller {
			// The caller's BYE was handled before its ACK (sipgo handles
			// each message on its own goroutine).
			reason = "caller hung up"
		} else {
			c.log.Warn("caller did not confirm the answer", "err", err)
		}
		c.hangupWinner()
		c.finish(calls.CauseAnswered, sip.StatusOK, reason)
		return false
	}
	if c.lateOffer && !c.takeAckAnswer(ackCh, answerCodecs) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); c.hangupCaller() }()
		c.hangupWinner()
		wg.Wait()
		c.finish(calls.CauseFailed, sip.StatusNotAcceptableHere, "no acceptable sdp answer in ack")
		return false
	}
	if c.m.opts.MediaTimeout > 0 {
		c.session.SetMediaTimeout(c.m.opts.MediaTimeout)
	}
	c.armTimers(w)
	return true
}

// growStackBy is the stack frame growStack takes: with the few frames
// below it, the goroutine's stack grows to 16 kB, as deep as a call's
// tear-down goes (sipgo's transaction and transport layers under the BYEs,
// the call record and the log).
const growStackBy = 12 << 10

// growStack grows the calling goroutine's stack in one step, while the
// goroutine is shallow. A goroutine's stack starts small and doubles when
// a call needs more, each time copying it and adjusting every frame on
// it, which costs with the number of frames (in a scratch program, a
// goroutine 30 frames of 256 bytes deep took 55 µs growing its stack three
// times and 20 µs with growStack first). The frame is zeroed, and read so
// that it is kept.
//
// Measured at 500 calls/s of 1 s (BenchmarkSIPpCallSetup, three pairs
// ABAB against the call waiting on its INVITE handler's goroutine), when
// an answered call waited on a goroutine of its own: CPU per call +5%
// without growStack, +1-2.5% with it. serveEnd's goroutine is as fresh.
//
//go:noinline
func growStack() byte {
	var pad [growStackBy]byte
	return pad[growIndex.Load()%growStackBy]
}

// growIndex is a load the compiler cannot see through (see growStack).
var growIndex atomic.Uint32

// tearDown hangs up whichever side is still up and finishes the call.
func (c *Call) tearDown(reason string) {
	c.mu.Lock()
	byCaller, byLeg := c.byeCaller, c.byeBy
	c.mu.Unlock()
	switch {
	case byCaller:
		reason = "caller hung up"
		c.hangupWinner()
	case byLeg != nil:
		reason = "callee hung up"
		c.hangupCaller()
	default:
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); c.hangupCaller() }()
		go func() { defer wg.Done(); c.hangupWinner() }()
		wg.Wait()
	}
	c.finish(calls.CauseAnswered, sip.StatusOK, reason)
}

// winnerDone is closed when the winner's dialog ends; nil when there is
// no winner's dialog.
func (c *Call) winnerDone() <-chan struct{} {
	if ctx := c.winnerContext(); ctx != nil {
		return ctx.Done()
	}
	return nil
}

func (c *Call) hangupCaller() {
	if c.caller.LoadState() == sip.DialogStateEnded {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), byeTimeout)
	defer cancel()
	ct := c.caller.InviteRequest.Contact()
	bye := sip.NewRequest(sip.BYE, ct.Address)
	c.m.sip.DecorateRequest(bye)
	if err := c.caller.WriteBye(ctx, bye); err != nil && !errors.Is(err, context.Canceled) {
		c.log.Debug("bye to caller", "err", err)
	}
}

func (c *Call) hangupWinner() {
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	if w != nil {
		w.bye()
	}
}

// markBye records which side hung up (called from the BYE handler).
func (c *Call) markBye(leg *outLeg) {
	c.mu.Lock()
	if !c.byeCaller && c.byeBy == nil {
		if leg == nil {
			c.byeCaller = true
		} else {
			c.byeBy = leg
		}
	}
	c.mu.Unlock()
	c.requestEnd("bye")
}

// setHoldState records whether the call is on hold after an offer/answer,
// suspends the media timeout while it is (a held party sends nothing), and
// tells the observer when the state changed.
func (c *Call) setHoldState(hold bool) {
	c.mu.Lock()
	changed := c.info.Held != hold
	c.info.Held = hold
	c.mu.Unlock()
	if c.m.opts.MediaTimeout > 0 && c.session != nil {
		if hold {
			c.session.SetMediaTimeout(0)
		} else {
			c.session.SetMediaTimeout(c.m.opts.MediaTimeout)
		}
	}
	if changed {
		kind := EventResumed
		if hold {
			kind = EventHeld
		}
		c.event(kind, nil)
	}
}

func errorIsTimeout(err error) bool {
	return errors.Is(err, sip.ErrTransactionTimeout) || errors.Is(err, context.DeadlineExceeded)
}
