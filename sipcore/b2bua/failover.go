package b2bua

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore/sdp"
)

// DefaultFailoverAfter is how long an INVITE to one of several
// destinations of a target may go without any response before the next is
// tried: far less than Timer B (64*T1, 32 s), which would outlast the ring
// timeout, as Kamailio's fr_timer is set short for failover.
const DefaultFailoverAfter = 4 * time.Second

// destinations are where the leg's INVITE may go, in order: its
// Destination, then its Alternates (RFC 3263 section 4.3). A leg without
// a Destination has one attempt, routed by its URI.
func (l *outLeg) destinations() []netip.AddrPort {
	if !l.target.Destination.IsValid() {
		return []netip.AddrPort{{}}
	}
	out := []netip.AddrPort{l.target.Destination}
	for _, a := range l.target.Alternates {
		if a.IsValid() && a != l.target.Destination {
			out = append(out, a)
		}
	}
	return out
}

// failover reports whether the attempt that ended with d and err is one to
// try the next destination after (RFC 3263 section 4.3): no response at
// all (silent, or the transaction timed out) or 503 Service Unavailable,
// while the leg itself is neither cancelled nor out of time.
func (l *outLeg) failover(d *sipgo.DialogClientSession, silent bool, err error) bool {
	if l.ctx.Err() != nil || l.timedOut.Load() || err == nil {
		return false
	}
	if d.InviteResponse != nil && d.InviteResponse.IsSuccess() {
		return false
	}
	var dr *sipgo.ErrDialogResponse
	if errors.As(err, &dr) {
		return dr.Res.StatusCode == sip.StatusServiceUnavailable
	}
	return silent || errorIsTimeout(err)
}

// invite sends the leg's INVITE to its current destination and waits for
// the final answer. Unless last, an attempt that hears nothing at all for
// Options.FailoverAfter is abandoned (silent). d is nil when the INVITE
// could not be sent.
func (l *outLeg) invite(target *Target, last bool) (d *sipgo.DialogClientSession, silent bool, err error) {
	req := l.buildInvite(target)
	l.mu().Lock()
	l.info.SIPCallID = string(*req.CallID())
	l.mu().Unlock()

	ctx := l.ctx
	var quiet *time.Timer
	var gaveUp chan struct{}
	if !last {
		actx, cancel := context.WithCancelCause(l.ctx)
		defer cancel(nil)
		ctx, gaveUp = actx, make(chan struct{})
		quiet = time.AfterFunc(l.call.m.opts.FailoverAfter, func() {
			if !l.heard.Load() {
				close(gaveUp)
				// No CANCEL without a provisional response (RFC 3261
				// section 9.1): drop the transaction.
				cancel(sipgo.WaitAnswerForceCancelErr)
			}
		})
		defer quiet.Stop()
	}
	l.heard.Store(false)
	// In-dialog requests (ACK, BYE) follow the 2xx's source when the
	// Contact cannot be reached directly.
	dua := &sipgo.DialogUA{Client: l.ep.Client, ContactHDR: l.ep.Contact, RewriteContact: l.rewritten()}
	// A cancel that came first finds nothing sent and is plain; one that
	// comes after finds the INVITE in flight and waits for a response or
	// for silentLeg (see newLeg's cancel). Sent with a context already
	// cancelled, sipgo would wait up to 64*T1 for a provisional response
	// to CANCEL it.
	for {
		sent := l.sentAt.Load()
		if sent == unsent {
			return nil, false, errUnsent
		}
		if l.sentAt.CompareAndSwap(sent, time.Now().UnixNano()) {
			break
		}
	}
	d, err = dua.WriteInvite(ctx, req)
	if err != nil {
		return nil, false, err
	}
	l.dialog = d
	opts := sipgo.AnswerOptions{OnResponse: func(r *sip.Response) error {
		if r.IsProvisional() {
			l.heard.Store(true)
			if l.cancelWanted.Load() {
				l.cancel() // cancelled before it was heard: CANCEL now
			}
		}
		if r.IsProvisional() && r.StatusCode > 100 {
			var desc *sdp.Description
			// Early media (RFC 3960): a 183 or a 180 with SDP carries the
			// callee's (or carrier's) ringback, bridged the same way.
			if len(r.Body()) > 0 {
				if p, err := sdp.Parse(r.Body()); err == nil {
					desc = p
					l.media.ApplySDP(p)
				}
			}
			l.send(legEvent{kind: legProgress, status: r.StatusCode, sdp: desc})
		}
		return nil
	}}
	if a := l.target.Auth; a != nil {
		opts.Username, opts.Password = a.Username, a.Password
	}
	for {
		err = d.WaitAnswer(ctx, opts)
		// sipgo gives up after ten responses; a bridge sending 180 every
		// second is normal, so keep waiting.
		if err != nil && err.Error() == "more than 10 responses received" {
			continue
		}
		break
	}
	if gaveUp != nil {
		select {
		case <-gaveUp:
			silent = true
		default:
		}
	}
	return d, silent, err
}
