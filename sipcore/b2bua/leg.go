package b2bua

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
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
)

// unsent is outLeg.sentAt of a leg cancelled before its INVITE left.
const unsent = -1

// errUnsent is what invite returns for a leg cancelled before its INVITE
// could leave.
var errUnsent = errors.New("cancelled before the INVITE was sent")

// silentLeg is how long a leg may stay without any response before a
// cancellation drops it instead of waiting to send CANCEL.
const silentLeg = 2 * time.Second

type legEventKind int

const (
	legProgress legEventKind = iota + 1
	legAnswered
	legFailed
)

type legEvent struct {
	kind   legEventKind
	leg    *outLeg
	status int
	sdp    *sdp.Description
}

// outLeg is one forked INVITE toward a callee.
type outLeg struct {
	call   *Call
	idx    int
	target LegTarget
	ep     sipcore.Endpoint
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	heard  atomic.Bool // a provisional response arrived: CANCEL is possible
	// cancelWanted: the leg was cancelled before any response; its first
	// provisional response sends the CANCEL.
	cancelWanted atomic.Bool
	timedOut     atomic.Bool // the leg's own timeout cancelled it
	// sentAt is the unix nanoseconds the INVITE left; 0 before, and
	// unsent once the leg was cancelled before it could leave (see
	// cancel and invite: one compare-and-swap each decides which came
	// first).
	sentAt  atomic.Int64
	timeout time.Duration

	media  *rtpcore.Leg
	origin *sdp.Origin
	dialog *sipgo.DialogClientSession

	byeOnce sync.Once
	round   *dialRound // a transfer's leg; nil: the call's fork

	timer sessionTimer  // this side's session timer, once it won (RFC 4028)
	minSE time.Duration // the callee's Min-SE from a 422; 0 before

	info LegInfo // guarded by call.mu
}

func (c *Call) newLeg(i int, lt LegTarget, target *Target, ringTimeout time.Duration) (*outLeg, error) {
	var ep sipcore.Endpoint
	var err error
	switch {
	case lt.ListenerID != "":
		ep, err = c.m.sip.Endpoint("", lt.ListenerID)
	case lt.Local.IsValid():
		ep, err = c.m.sip.EndpointForLocal(lt.Transport, lt.Local)
	default:
		ep, err = c.m.sip.Endpoint(lt.Transport, "")
	}
	if err != nil {
		return nil, err
	}
	ml, err := c.session.NewLeg(fmt.Sprintf("callee-%d", i+1))
	if err != nil {
		return nil, fmt.Errorf("media leg: %w", err)
	}
	// The leg's own limit, counted once it starts; the call's ring timer
	// bounds the whole fork anyway.
	timeout := lt.Timeout
	if timeout <= 0 || timeout > ringTimeout {
		timeout = ringTimeout
	}
	l := &outLeg{
		call: c, idx: i, target: lt, ep: ep, media: ml, origin: sdp.NewOrigin(), timeout: timeout,
		log:  c.log.With("leg", i+1, "target", lt.Name),
		info: LegInfo{Target: lt.Name, Kind: lt.Kind, Extension: lt.Extension, Start: time.Now()},
	}
	l.origin.Username = c.m.sip.UserAgent()
	ctx, cancel := context.WithCancelCause(context.Background())
	l.ctx = ctx
	l.cancel = func() {
		// RFC 3261 9.1: no CANCEL before a provisional response, and sipgo
		// waits up to 64*T1 for one. A leg silent for a while (a dead
		// contact) is dropped at once; a young one gets its CANCEL once its
		// 100 arrives.
		//
		// A younger silent leg is cancelled at its first provisional
		// response, or dropped once silentLeg old: a stale binding of a
		// phone that re-registered from another port must not hold the
		// call's end for 64*T1 after every other leg is done.
		if l.sentAt.CompareAndSwap(0, unsent) || l.heard.Load() {
			cancel(nil) // nothing sent (invite will not send it), or CANCEL possible
			return
		}
		sent := l.sentAt.Load()
		if sent == unsent {
			cancel(nil)
			return
		}
		age := time.Since(time.Unix(0, sent))
		if age > silentLeg {
			cancel(sipgo.WaitAnswerForceCancelErr)
			return
		}
		if l.cancelWanted.Swap(true) {
			return // already waiting
		}
		time.AfterFunc(silentLeg-age, func() {
			if !l.heard.Load() {
				cancel(sipgo.WaitAnswerForceCancelErr)
			}
			cancel(nil)
		})
		if l.heard.Load() { // a provisional arrived meanwhile
			cancel(nil)
		}
	}
	return l, nil
}

// rewritten reports whether the leg's destination differs from the address
// its URI names (NAT, or the registering TCP connection).
func (l *outLeg) rewritten() bool {
	lt := l.target
	if !lt.Destination.IsValid() {
		return false
	}
	ip, err := netip.ParseAddr(strings.Trim(lt.URI.Host, "[]"))
	if err != nil {
		return true
	}
	port := lt.URI.Port
	if port == 0 {
		port = 5060
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)) != lt.Destination
}

// requestURI is the target URI, with host and port replaced by the
// destination when they differ (as Asterisk's rewrite_contact does): the
// CANCEL sipgo builds goes to the Request-URI, and so must every request of
// the leg.
func (l *outLeg) requestURI() sip.Uri {
	u := l.target.URI
	if !l.rewritten() {
		return u
	}
	u = *u.Clone()
	u.Host = l.target.Destination.Addr().String()
	u.Port = int(l.target.Destination.Port())
	return u
}

func (l *outLeg) send(ev legEvent) {
	ev.leg = l
	ch, done := l.call.legCh, l.call.forkDone
	if r := l.round; r != nil {
		ch, done = r.ch, r.done
	}
	select {
	case ch <- ev:
	case <-done:
	}
}

func (l *outLeg) buildInvite(target *Target) *sip.Request {
	c := l.call
	lt := l.target
	ruri := l.requestURI()
	req := sip.NewRequest(sip.INVITE, ruri)
	req.SetTransport(strings.ToUpper(l.ep.Transport))
	if lt.Destination.IsValid() {
		req.SetDestination(lt.Destination.String())
	}
	host := target.CallerID.Host
	if host == "" {
		host = target.Meta.Domain
	}
	if host == "" {
		host = l.ep.Host
	}
	from := &sip.FromHeader{DisplayName: target.CallerID.DisplayName, Address: sip.Uri{Scheme: "sip", User: target.CallerID.User, Host: host}}
	from.Params.Add("tag", sip.GenerateTagN(16))
	toURI := lt.To
	if toURI.Host == "" {
		toURI = sip.Uri{Scheme: lt.URI.Scheme, User: lt.URI.User, Host: lt.URI.Host, Port: lt.URI.Port}
		if target.Meta.Domain != "" {
			toURI.Host, toURI.Port = target.Meta.Domain, 0
		}
	}
	to := &sip.ToHeader{Address: toURI}
	req.AppendHeader(from)
	req.AppendHeader(to)
	callID := sip.CallIDHeader(sip.GenerateTagN(24) + "@" + l.ep.Host)
	req.AppendHeader(&callID)
	req.AppendHeader(sip.HeaderClone(&l.ep.Contact))
	mf := sip.MaxForwardsHeader(c.hops)
	req.AppendHeader(&mf)
	c.m.sip.DecorateRequest(req)
	req.AppendHeader(sip.NewHeader("Allow", c.m.sip.Allow()))
	for _, h := range l.timerHeaders() {
		req.AppendHeader(h)
	}
	for _, h := range lt.Headers {
		req.AppendHeader(h)
	}
	req.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
	req.SetBody(l.origin.Offer(c.mediaAddr, l.media.Port(), c.codecs, ""))
	return req
}

// run sends the INVITE and follows it to a final answer.
func (l *outLeg) run() {
	c := l.call
	defer func() {
		if !l.won() {
			_ = l.media.Close()
		}
	}()
	if d := l.target.Delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-l.ctx.Done():
			t.Stop()
			l.finish(sip.StatusRequestTerminated, calls.CauseCancelled, false)
			return
		}
		l.mu().Lock()
		l.info.Start = time.Now()
		l.mu().Unlock()
	}
	c.mu.Lock()
	target := c.target
	if l.round != nil {
		target = l.round.target
	}
	c.mu.Unlock()

	timer := time.AfterFunc(l.timeout, func() {
		l.timedOut.Store(true)
		l.cancel()
	})
	defer timer.Stop()
	var d *sipgo.DialogClientSession
	var err error
	dests := l.destinations()
	for i := 0; i < len(dests); i++ {
		dst := dests[i]
		last := i == len(dests)-1
		if dst.IsValid() {
			l.target.Destination = dst
		}
		var silent bool
		d, silent, err = l.invite(target, last)
		if d == nil && errors.Is(err, errUnsent) {
			l.finish(sip.StatusRequestTerminated, calls.CauseCancelled, true)
			return
		}
		if d == nil {
			l.log.Warn("invite not sent", "err", err)
			if !last && l.ctx.Err() == nil {
				continue
			}
			l.finish(sip.StatusServiceUnavailable, calls.CauseError, true)
			return
		}
		if l.retrySessionInterval(err) {
			i-- // the same destination, with a longer session interval
			continue
		}
		if last || !l.failover(d, silent, err) {
			break
		}
		l.log.Info("target failed, trying the next", "destination", dst.String(), "next", dests[i+1].String(), "err", err)
	}
	var dr *sipgo.ErrDialogResponse
	switch {
	case err == nil:
		l.answered(d)
	case d.InviteResponse != nil && d.InviteResponse.IsSuccess():
		// A 2xx raced our CANCEL: take the call and drop it at once.
		l.ackAndBye(d)
		l.finish(sip.StatusRequestTerminated, calls.CauseCancelled, true)
	case errors.As(err, &dr):
		code := dr.Res.StatusCode
		l.finish(code, legCause(code), true)
	case l.timedOut.Load() || errorIsTimeout(err):
		l.finish(sip.StatusRequestTimeout, calls.CauseNoAnswer, true)
	case l.ctx.Err() != nil:
		l.finish(sip.StatusRequestTerminated, calls.CauseCancelled, true)
	default:
		l.log.Warn("invite failed", "err", err)
		l.finish(sip.StatusServiceUnavailable, calls.CauseError, true)
	}
}

func (l *outLeg) mu() *sync.Mutex { return &l.call.mu }

func (l *outLeg) won() bool {
	l.mu().Lock()
	defer l.mu().Unlock()
	return l.info.Won
}

func legCause(code int) calls.Cause {
	switch code {
	case sip.StatusBusyHere, statusBusyEverywhere:
		return calls.CauseBusy
	case statusDecline, sip.StatusForbidden:
		return calls.CauseRejected
	case sip.StatusRequestTerminated:
		return calls.CauseCancelled
	case sip.StatusRequestTimeout, sip.StatusTemporarilyUnavailable:
		return calls.CauseNoAnswer
	}
	return calls.CauseFailed
}

// finish records a leg that did not win and, when report is set, tells the
// call.
func (l *outLeg) finish(status int, cause calls.Cause, report bool) {
	l.mu().Lock()
	l.info.End = time.Now()
	l.info.SIPStatus = status
	l.info.Cause = cause
	li := l.info
	l.mu().Unlock()
	l.call.event(EventLegEnded, &li)
	if report {
		l.send(legEvent{kind: legFailed, status: status})
	}
}

// answered handles a 2xx: the first one wins the call, others are dropped.
func (l *outLeg) answered(d *sipgo.DialogClientSession) {
	c := l.call
	var desc *sdp.Description
	if p, err := sdp.Parse(d.InviteResponse.Body()); err == nil {
		desc = p
	}
	if !c.claim(l) {
		l.ackAndBye(d)
		l.finish(sip.StatusOK, calls.CauseCancelled, false)
		return
	}
	if err := d.Ack(context.Background()); err != nil {
		l.log.Warn("ack", "err", err)
	}
	c.m.addDialog(d.ID, dialogRef{call: c, leg: l})
	l.negotiateLeg(d.InviteRequest, d.InviteResponse)
	l.mu().Lock()
	l.info.Answer = time.Now()
	l.info.SIPStatus = sip.StatusOK
	l.info.Won = true
	l.info.Cause = calls.CauseAnswered
	l.mu().Unlock()
	l.send(legEvent{kind: legAnswered, sdp: desc})
}

func (l *outLeg) ackAndBye(d *sipgo.DialogClientSession) {
	ctx, cancel := context.WithTimeout(context.Background(), byeTimeout)
	defer cancel()
	if err := d.Ack(ctx); err != nil {
		l.log.Debug("ack late 2xx", "err", err)
	}
	l.writeBye(ctx, d)
}

func (l *outLeg) writeBye(ctx context.Context, d *sipgo.DialogClientSession) {
	ct := d.InviteResponse.Contact()
	uri := d.InviteRequest.Recipient
	if ct != nil {
		uri = ct.Address
	}
	bye := sip.NewRequest(sip.BYE, uri)
	if l.target.Destination.IsValid() {
		bye.SetDestination(l.target.Destination.String())
	}
	l.call.m.sip.DecorateRequest(bye)
	if err := d.WriteBye(ctx, bye); err != nil && !errors.Is(err, context.Canceled) {
		l.log.Debug("bye to callee", "err", err)
	}
}

// bye ends the answered leg (once).
func (l *outLeg) bye() {
	l.byeOnce.Do(func() {
		d := l.dialog
		if d == nil || d.LoadState() == sip.DialogStateEnded {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), byeTimeout)
		defer cancel()
		l.writeBye(ctx, d)
	})
	l.mu().Lock()
	if l.info.End.IsZero() {
		l.info.End = time.Now()
	}
	l.mu().Unlock()
}

// claim makes l the winner unless another leg won or the call is over.
func (c *Call) claim(l *outLeg) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := l.round; r != nil {
		if r.claimed != nil || r.closed {
			return false
		}
		r.claimed = l
		return true
	}
	if c.claimed != nil || c.forkClosed {
		return false
	}
	c.claimed = l
	return true
}
