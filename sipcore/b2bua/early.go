package b2bua

import (
	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore/sdp"
	"pbx/sipcore"
)

// earlyMedia bridges the caller to a leg that sent a provisional response
// with SDP (RFC 3960 early media: a 183, or a 180 from a carrier playing
// ringback) and passes the same status on with the PBX's SDP, so the
// caller hears what the callee side plays before the answer.
func (c *Call) earlyMedia(ev legEvent) {
	_ = c.session.Bridge(c.callerLeg, ev.leg.media)
	body, _, err := c.callerOrig.Answer(c.callerSDP, c.mediaAddr, c.callerLeg.Port(), ev.sdp.Codecs, "")
	if err != nil {
		c.log.Debug("early media answer", "err", err)
		return
	}
	status := ev.status
	if status != sip.StatusRinging {
		status = sip.StatusSessionInProgress
	}
	_ = c.caller.Respond(status, sipcore.Phrase(status), body, sip.NewHeader("Content-Type", "application/sdp"))
}

// negotiated returns the codecs agreed with the caller.
func (c *Call) negotiated() []sdp.Codec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.codecs
}

// lateOfferBody is the PBX's offer to a late-offer caller in its 2xx: the
// caller's media leg with the codecs the answering callee accepted (the
// relay does not transcode, so nothing else could flow), else every
// configured codec, and telephone-event. It returns the body and the
// codecs offered.
func (c *Call) lateOfferBody(calleeAnswer *sdp.Description) ([]byte, []sdp.Codec) {
	codecs := c.m.opts.Codecs
	if calleeAnswer != nil {
		if common, err := sdp.Negotiate(calleeAnswer, c.m.opts.Codecs); err == nil {
			codecs = common
		}
	}
	return c.callerOrig.Offer(c.mediaAddr, c.callerLeg.Port(), codecs, ""), codecs
}

// takeAckAnswer applies the SDP answer a late-offer caller put in its ACK
// (RFC 3261 section 13.2.1, RFC 3264 section 6) to the caller's media leg.
// It reports false when the ACK carried no usable answer: the session
// cannot run and is ended.
func (c *Call) takeAckAnswer(ch chan *sip.Request, offered []sdp.Codec) bool {
	var ack *sip.Request
	select {
	case ack = <-ch:
	default:
	}
	if ack == nil || len(ack.Body()) == 0 {
		c.log.Info("late-offer caller sent no answer in its ack")
		return false
	}
	ans, err := sdp.Parse(ack.Body())
	if err != nil {
		c.log.Info("bad sdp answer in ack", "err", err)
		return false
	}
	codecs, err := sdp.Negotiate(ans, offered)
	if err != nil {
		c.log.Info("sdp answer in ack shares no codec with the offer", "err", err)
		return false
	}
	c.callerLeg.ApplySDP(ans)
	c.mu.Lock()
	c.codecs, c.callerSDP = codecs, ans
	c.mu.Unlock()
	return true
}
