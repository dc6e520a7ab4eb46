package b2bua

import (
	"net/netip"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore/calls"
)

// runReplaces takes over a party of another call for a new INVITE with
// Replaces (RFC 3891): a phone completing an attended transfer by itself,
// or picking up a call. The INVITE's dialog replaces the named one: the
// named party gets BYE (its call ends with reason "replaced"), and the
// new caller is joined to the party it was talking to. The Replaces header
// matches as tags of an incoming request (section 6.1: to-tag is the
// PBX's); no match, an unanswered call or another tenant's gets 481, an
// INVITE without an offer 488 (the joined party's codecs must be offered).
func (c *Call) runReplaces(rep string, offer *sdp.Description) {
	fail := func(status int, reason string) {
		c.event(EventCreated, nil)
		c.fail(status, calls.CauseFailed, reason)
	}
	old, ok := c.m.replaced(rep, c)
	if !ok || old.ended() {
		fail(sip.StatusCallTransactionDoesNotExists, "replaces matches no dialog")
		return
	}
	x0 := old.c
	x0.mu.Lock()
	w := x0.winner
	info := x0.info
	x0.mu.Unlock()
	if w == nil || (old.leg != nil && old.leg != w) || c.m.transferring(x0, nil) {
		fail(sip.StatusCallTransactionDoesNotExists, "replaces names no answered party")
		return
	}
	peer := party{c: x0, leg: w}
	if old.leg != nil {
		peer = party{c: x0}
	}
	if offer == nil {
		fail(sip.StatusNotAcceptableHere, "no sdp offer with replaces")
		return
	}
	codecs, err := sdp.Negotiate(offer, x0.negotiated())
	if err != nil {
		fail(sip.StatusNotAcceptableHere, "no codec of the replaced call")
		return
	}
	c.mu.Lock()
	c.codecs = codecs
	c.info.Tenant, c.info.Direction, c.info.Meta = info.Tenant, info.Direction, info.Meta
	c.info.Extension, c.info.DID, c.info.Trunk = info.Extension, info.DID, info.Trunk
	c.info.To = peer.name()
	c.mu.Unlock()
	if !c.openMedia(offer) {
		fail(sip.StatusServiceUnavailable, "no media ports")
		return
	}
	c.event(EventCreated, nil)

	x := &transfer{owner: c, kind: TransferAttended, a: party{c: c}, b: peer, transferor: party{c: c}, other: x0, codecs: codecs, done: make(chan struct{})}
	if x0.held() {
		x.held = peer
	}
	c.m.addDialog(peer.dialogID(), dialogRef{call: c, leg: peer.leg, xfer: x, side: 1})
	select {
	case x0.transferJobs <- transferJob{x: x, handoff: old}:
		x0.wake()
	default:
		c.m.addDialog(peer.dialogID(), dialogRef{call: x0, leg: peer.leg})
		close(x.done)
		c.fail(sip.StatusServiceUnavailable, calls.CauseFailed, "replaced call busy transferring")
		return
	}
	if err := rtpcore.Bridge(peer.media(), c.callerLeg); err != nil {
		c.log.Warn("bridge replaces", "err", err)
	}
	body, _, err := c.callerOrig.Answer(offer, c.mediaAddr, c.callerLeg.Port(), codecs, "")
	if err != nil {
		c.log.Warn("answer sdp", "err", err)
	}
	now := time.Now()
	c.mu.Lock()
	c.info.State, c.info.Answer, c.info.AnsweredBy = StateAnswered, now, peer.name()
	c.mu.Unlock()
	c.event(EventAnswered, nil)
	if err := c.caller.RespondSDP(body); err != nil {
		c.log.Info("replacing caller did not confirm the answer", "err", err)
		close(x.done)
		peer.hangup()
		c.finish(calls.CauseAnswered, sip.StatusOK, "no ack from caller")
		return
	}
	c.transferEvent(x, transferJob{target: sip.Uri{User: peer.name()}}, sip.StatusOK)
	c.finish(calls.CauseAnswered, sip.StatusOK, c.runJoined(x))
}

// openMedia opens the call's media session and the caller's leg, pointed
// at offer.
func (c *Call) openMedia(offer *sdp.Description) bool {
	c.mediaAddr = c.m.opts.Media.AdvertisedAddr()
	if !c.mediaAddr.IsValid() || c.mediaAddr.IsUnspecified() {
		c.mediaAddr = netip.MustParseAddr("127.0.0.1")
		if ip, err := netip.ParseAddr(strings.Trim(c.callerEP.Host, "[]")); err == nil {
			c.mediaAddr = ip
		}
	}
	sess, err := c.m.opts.Media.NewSession(rtpcore.SessionOptions{
		ID:        string(c.id),
		OnTimeout: func(*rtpcore.Session, time.Duration) { c.requestEnd("media timeout") },
	})
	if err != nil {
		return false
	}
	leg, err := sess.NewLeg("caller")
	if err != nil {
		_ = sess.Close()
		return false
	}
	c.session, c.callerLeg = sess, leg
	leg.ApplySDP(offer)
	c.callerOrig = sdp.NewOrigin()
	c.callerOrig.Username = c.m.sip.UserAgent()
	return true
}
