package b2bua

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore/sdp"
	"pbx/sipcore"
)

// Session timers (RFC 4028). Each side of a call (the caller's dialog and
// the answering leg's) negotiates its own session interval and refresher,
// as Asterisk's chan_pjsip does: the PBX refreshes the sides where it is
// the refresher and ends the call with BYE on both sides when a side whose
// peer is the refresher stays silent past the interval.

// Defaults of Options' session timer settings.
const (
	// DefaultMinSE is the smallest session interval the PBX accepts: the
	// floor RFC 4028 section 4 sets for Min-SE (90 s), also chan_pjsip's
	// timers_min_se.
	DefaultMinSE = 90 * time.Second
	// DefaultSessionExpires is the interval the PBX asks of callees:
	// RFC 4028 section 4 recommends 1800 s (chan_pjsip's timers_sess_expires).
	DefaultSessionExpires = 1800 * time.Second
	// maxExpiryGrace is the most RFC 4028 section 10 lets a session outlive
	// its interval without a refresh: min(32 s, interval/3) before it ends.
	maxExpiryGrace = 32 * time.Second
)

const (
	refresherUAC = "uac"
	refresherUAS = "uas"
	tagTimer     = "timer"
	hdrSE        = "Session-Expires"
	hdrSECompact = "x" // RFC 4028 section 4
	hdrMinSE     = "Min-SE"
	statusSmall  = 422 // Session Interval Too Small, RFC 4028 section 6
)

// sessionTimer is one side's session timer.
type sessionTimer struct {
	mu       sync.Mutex
	interval time.Duration // 0: no session timer on this side
	refresh  bool          // the PBX is the refresher
	update   bool          // the peer allows UPDATE: refresh without SDP
	supports bool          // the peer supports the timer extension
	sdp      []byte        // the description the PBX last sent on this side
	t        *time.Timer
}

// sessionExpires reads a message's Session-Expires header: the interval
// and the refresher parameter (empty when absent).
func sessionExpires(h interface{ GetHeader(string) sip.Header }) (time.Duration, string, bool) {
	hdr := h.GetHeader(hdrSE)
	if hdr == nil {
		hdr = h.GetHeader(hdrSECompact)
	}
	if hdr == nil {
		return 0, "", false
	}
	parts := strings.Split(hdr.Value(), ";")
	secs, err := strconv.Atoi(strings.TrimSpace(parts[0]))
	if err != nil || secs <= 0 {
		return 0, "", false
	}
	refresher := ""
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(k, "refresher") {
			refresher = strings.ToLower(strings.TrimSpace(v))
		}
	}
	return time.Duration(secs) * time.Second, refresher, true
}

// listsTag reports whether one of the headers named (long or compact form)
// lists tag, as Supported, Require and Allow do.
func listsTag(h interface {
	GetHeaders(string) []sip.Header
}, tag string, names ...string) bool {
	for _, n := range names {
		for _, hdr := range h.GetHeaders(n) {
			for _, v := range strings.Split(hdr.Value(), ",") {
				if strings.EqualFold(strings.TrimSpace(v), tag) {
					return true
				}
			}
		}
	}
	return false
}

func supportsTimer(h interface {
	GetHeaders(string) []sip.Header
}) bool {
	return listsTag(h, tagTimer, "Supported", "k", "Require")
}

func allowsUpdate(h interface {
	GetHeaders(string) []sip.Header
}) bool {
	return listsTag(h, string(sip.UPDATE), "Allow")
}

func secs(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

// tooSmall answers a request whose Session-Expires is below the PBX's
// minimum with 422 and Min-SE (RFC 4028 section 9), or returns nil. A
// sender that does not support the extension (a proxy put the header in)
// is not refused: its interval is raised to the minimum instead.
func (m *Manager) tooSmall(req *sip.Request) *sip.Response {
	se, _, ok := sessionExpires(req)
	if !ok || se >= m.opts.MinSE || !supportsTimer(req) {
		return nil
	}
	res := sipcore.Response(req, statusSmall)
	res.AppendHeader(sip.NewHeader(hdrMinSE, secs(m.opts.MinSE)))
	return res
}

// timerOf returns the session timer of side leg (nil: the caller).
func (c *Call) timerOf(leg *outLeg) *sessionTimer {
	if leg == nil {
		return &c.callerTimer
	}
	return &leg.timer
}

// negotiateCaller sets the caller side's timer from its INVITE and returns
// the headers of the 2xx. Per RFC 4028 section 9 the 2xx carries
// Session-Expires with the refresher when the INVITE asked for a session
// timer, and Require: timer when the caller supports it. Where the caller
// names no refresher the PBX picks it as pjsip does: the caller when it
// supports the extension, else the PBX.
func (c *Call) negotiateCaller(body []byte) []sip.Header {
	st := &c.callerTimer
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sdp = body
	st.update = allowsUpdate(c.invite)
	st.supports = supportsTimer(c.invite)
	hdrs := []sip.Header{sip.NewHeader("Supported", strings.Join(sipcore.Supported, ", "))}
	se, refresher, ok := sessionExpires(c.invite)
	if !ok {
		return hdrs
	}
	if refresher != refresherUAC && refresher != refresherUAS {
		refresher = refresherUAS
		if st.supports {
			refresher = refresherUAC
		}
	}
	if !st.supports {
		// A caller without the extension cannot refresh (a proxy put the
		// header in): RFC 4028 section 9 makes the UAS the refresher, with
		// an interval no shorter than its minimum.
		refresher = refresherUAS
		se = max(se, c.m.opts.MinSE)
	}
	st.interval, st.refresh = se, refresher == refresherUAS
	hdrs = append(hdrs, sip.NewHeader(hdrSE, secs(se)+";refresher="+refresher))
	if st.supports {
		hdrs = append(hdrs, sip.NewHeader("Require", tagTimer))
	}
	return hdrs
}

// timerHeaders are the headers of the PBX's INVITE toward a callee: it
// supports the extension and asks for Options.SessionExpires (or what a
// 422 asked for), no shorter than Min-SE (RFC 4028 section 7.1), leaving
// the refresher to the callee.
func (l *outLeg) timerHeaders() []sip.Header {
	m := l.call.m
	se := max(m.opts.SessionExpires, l.minSE)
	return []sip.Header{
		sip.NewHeader("Supported", strings.Join(sipcore.Supported, ", ")),
		sip.NewHeader(hdrSE, secs(se)),
		sip.NewHeader(hdrMinSE, secs(max(m.opts.MinSE, l.minSE))),
	}
}

// retrySessionInterval reports whether err is a 422 (Session Interval Too
// Small) whose Min-SE exceeds what the leg asked: RFC 4028 section 7.4 has
// the UAC retry with that Min-SE as its Session-Expires, once.
func (l *outLeg) retrySessionInterval(err error) bool {
	var dr *sipgo.ErrDialogResponse
	if !errors.As(err, &dr) || dr.Res.StatusCode != statusSmall || l.minSE > 0 {
		return false
	}
	h := dr.Res.GetHeader(hdrMinSE)
	if h == nil {
		return false
	}
	n, perr := strconv.Atoi(strings.TrimSpace(strings.SplitN(h.Value(), ";", 2)[0]))
	want := time.Duration(n) * time.Second
	if perr != nil || want <= l.call.m.opts.SessionExpires {
		return false
	}
	l.minSE = want
	return true
}

// negotiateLeg sets the answering leg's timer from its 2xx (RFC 4028
// section 7.2): without Session-Expires there is no session timer;
// refresher=uac makes the PBX (the UAC) the refresher.
func (l *outLeg) negotiateLeg(invite *sip.Request, res *sip.Response) {
	st := &l.timer
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sdp = invite.Body()
	st.update = allowsUpdate(res)
	st.supports = supportsTimer(res)
	se, refresher, ok := sessionExpires(res)
	if !ok {
		return
	}
	st.interval, st.refresh = se, refresher != refresherUAS
}

// armTimers starts both sides' session timers once the call is answered.
func (c *Call) armTimers(w *outLeg) {
	c.armTimer(nil)
	c.armTimer(w)
}

// stopTimers stops both sides' timers (the call ended).
func (c *Call) stopTimers() {
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	sts := []*sessionTimer{&c.callerTimer}
	if w != nil {
		sts = append(sts, &w.timer)
	}
	for _, st := range sts {
		st.mu.Lock()
		if st.t != nil {
			st.t.Stop()
		}
		st.interval = 0
		st.mu.Unlock()
	}
}

// armTimer (re)starts side leg's timer for a fresh interval: as refresher
// the PBX refreshes at half the interval (RFC 4028 section 10); otherwise
// the session expires when the interval less min(32 s, interval/3) passes
// without a refresh.
func (c *Call) armTimer(leg *outLeg) {
	st := c.timerOf(leg)
	st.mu.Lock()
	defer st.mu.Unlock()
	c.armLocked(st, leg, 0)
}

// armLocked arms st; after, when positive, overrides the delay.
func (c *Call) armLocked(st *sessionTimer, leg *outLeg, after time.Duration) {
	if st.t != nil {
		st.t.Stop()
	}
	if st.interval <= 0 {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	if st.refresh {
		d := st.interval / 2
		if after > 0 {
			d = after
		}
		st.t = time.AfterFunc(d, func() { c.refreshSide(leg) })
		return
	}
	iv := st.interval
	d := iv - min(maxExpiryGrace, iv/3)
	st.t = time.AfterFunc(d, func() { c.expired(leg, iv) })
}

// expired ends a call whose peer should have refreshed side leg and did
// not (RFC 4028 section 10): BYE on both sides.
func (c *Call) expired(leg *outLeg, interval time.Duration) {
	c.log.Info("session timer expired", "caller_side", leg == nil, "interval", interval)
	c.requestEnd(ReasonSessionExpired)
}

// refreshed restarts side leg's timer on a refresh request the peer sent
// (a re-INVITE or UPDATE answered 2xx, RFC 4028 section 9), taking its
// Session-Expires and refresher, and adds the session timer headers to
// res, the 2xx. A request without Session-Expires keeps the side's
// interval.
func (c *Call) refreshed(leg *outLeg, req *sip.Request, res *sip.Response) {
	st := c.timerOf(leg)
	st.mu.Lock()
	defer st.mu.Unlock()
	if res.Body() != nil {
		st.sdp = res.Body()
	}
	se, refresher, ok := sessionExpires(req)
	if ok {
		st.interval = max(se, c.m.opts.MinSE)
		switch refresher {
		case refresherUAC:
			st.refresh = false
		case refresherUAS:
			st.refresh = true
		}
	}
	if st.interval <= 0 {
		return
	}
	role := refresherUAC // the request's sender
	if st.refresh {
		role = refresherUAS
	}
	res.AppendHeader(sip.NewHeader(hdrSE, secs(st.interval)+";refresher="+role))
	if supportsTimer(req) {
		res.AppendHeader(sip.NewHeader("Require", tagTimer))
	}
	c.armLocked(st, leg, 0)
}

// addRefreshHeaders puts side leg's session timer on a re-INVITE or
// UPDATE the PBX sends there and records its SDP, if any.
func (c *Call) addRefreshHeaders(leg *outLeg, req *sip.Request) {
	st := c.timerOf(leg)
	st.mu.Lock()
	defer st.mu.Unlock()
	if b := req.Body(); b != nil {
		st.sdp = b
	}
	if st.interval <= 0 {
		return
	}
	role := refresherUAS // the peer, the request's UAS
	if st.refresh {
		role = refresherUAC
	}
	req.AppendHeader(sip.NewHeader("Supported", strings.Join(sipcore.Supported, ", ")))
	req.AppendHeader(sip.NewHeader(hdrSE, secs(st.interval)+";refresher="+role))
	req.AppendHeader(sip.NewHeader(hdrMinSE, secs(c.m.opts.MinSE)))
}

// refreshAnswered takes the 2xx to a re-INVITE or UPDATE the PBX sent on
// side leg (RFC 4028 section 7.4): its Session-Expires sets the interval
// and refresher; the session is refreshed either way.
func (c *Call) refreshAnswered(leg *outLeg, res *sip.Response) {
	st := c.timerOf(leg)
	st.mu.Lock()
	defer st.mu.Unlock()
	if se, refresher, ok := sessionExpires(res); ok {
		st.interval, st.refresh = se, refresher != refresherUAS
	}
	c.armLocked(st, leg, 0)
}

// refreshSide refreshes side leg as its refresher: an UPDATE without SDP
// when the peer allows it, else a re-INVITE offering the description last
// sent there unchanged (same version, RFC 4028 section 10 and RFC 3264
// section 8). A refresh that times out or gets 408 or 481 ends the call
// (RFC 4028 section 10); another failure is retried at a quarter of the
// interval, and an UPDATE the peer refuses falls back to re-INVITE.
func (c *Call) refreshSide(leg *outLeg) {
	select {
	case <-c.done:
		return
	default:
	}
	c.reinvite.Lock()
	defer c.reinvite.Unlock()
	st := c.timerOf(leg)
	st.mu.Lock()
	update, body, interval := st.update, st.sdp, st.interval
	st.mu.Unlock()
	if interval <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	defer cancel()
	var status int
	var err error
	if update {
		status, err = c.sendUpdate(ctx, leg)
		if status == sip.StatusMethodNotAllowed || status == sip.StatusNotImplemented {
			st.mu.Lock()
			st.update = false
			c.armLocked(st, leg, time.Millisecond)
			st.mu.Unlock()
			return
		}
	} else {
		var ans *sdp.Description
		status, ans, err = c.sendReInvite(ctx, leg == nil, c.sideLeg(leg), body)
		if ans != nil {
			c.mediaOf(leg).ApplySDP(ans)
		}
	}
	switch {
	case err != nil && status == 0, status == sip.StatusRequestTimeout, status == sip.StatusCallTransactionDoesNotExists:
		select {
		case <-c.done:
		default:
			c.log.Info("session refresh failed", "caller_side", leg == nil, "status", status, "err", err)
			c.requestEnd(ReasonSessionRefreshFailed)
		}
	case status >= 200 && status < 300:
		// refreshAnswered re-armed the timer.
	default:
		c.log.Debug("session refresh refused, retrying", "caller_side", leg == nil, "status", status)
		st.mu.Lock()
		c.armLocked(st, leg, max(interval/4, time.Millisecond))
		st.mu.Unlock()
	}
}

// sideLeg returns the winner when leg is a leg, nil for the caller side.
func (c *Call) sideLeg(leg *outLeg) *outLeg {
	if leg != nil {
		return leg
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.winner
}

// mediaOf is side leg's RTP leg.
func (c *Call) mediaOf(leg *outLeg) interface{ ApplySDP(*sdp.Description) } {
	if leg == nil {
		return c.callerLeg
	}
	return leg.media
}

// sendUpdate sends an UPDATE without body (a session refresh) on side leg
// and returns its final status.
func (c *Call) sendUpdate(ctx context.Context, leg *outLeg) (int, error) {
	var res *sip.Response
	var err error
	if leg == nil {
		req := sip.NewRequest(sip.UPDATE, c.caller.InviteRequest.Contact().Address)
		c.m.sip.DecorateRequest(req)
		c.addRefreshHeaders(nil, req)
		res, err = c.caller.Do(ctx, req)
	} else {
		d := leg.dialog
		uri := d.InviteRequest.Recipient
		if ct := d.InviteResponse.Contact(); ct != nil {
			uri = ct.Address
		}
		req := sip.NewRequest(sip.UPDATE, uri)
		if leg.target.Destination.IsValid() {
			req.SetDestination(leg.target.Destination.String())
		}
		c.m.sip.DecorateRequest(req)
		c.addRefreshHeaders(leg, req)
		res, err = d.Do(ctx, req)
	}
	if err != nil {
		if errorIsTimeout(err) {
			return sip.StatusRequestTimeout, err
		}
		return 0, err
	}
	if res.IsSuccess() {
		c.refreshAnswered(leg, res)
	}
	return res.StatusCode, nil
}
