package b2bua

import (
	"context"
	"fmt"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
)

// party is one answered end of a call as a transfer sees it: the caller's
// dialog (leg nil) or an answered leg of call c. A transfer joins two
// parties that may belong to different calls (attended transfer).
type party struct {
	c   *Call
	leg *outLeg // nil: c's caller
}

func (p party) valid() bool { return p.c != nil }

func (p party) media() *rtpcore.Leg {
	if p.leg != nil {
		return p.leg.media
	}
	return p.c.callerLeg
}

func (p party) origin() *sdp.Origin {
	if p.leg != nil {
		return p.leg.origin
	}
	return p.c.callerOrig
}

func (p party) endpoint() sipcore.Endpoint {
	if p.leg != nil {
		return p.leg.ep
	}
	return p.c.callerEP
}

// dialogID is the party's dialog id as the Manager keys it.
func (p party) dialogID() string {
	if p.leg != nil {
		return p.leg.dialog.ID
	}
	return p.c.caller.ID
}

// done is closed once the party's dialog ended (BYE either way).
func (p party) done() <-chan struct{} {
	if p.leg != nil {
		return p.leg.dialog.Context().Done()
	}
	return p.c.caller.Context().Done()
}

func (p party) ended() bool {
	select {
	case <-p.done():
		return true
	default:
		return false
	}
}

// name is how the call record names the party: its extension, else the
// number or user it called from.
func (p party) name() string {
	if p.leg != nil {
		if p.leg.target.Extension != "" {
			return p.leg.target.Extension
		}
		return p.leg.target.Name
	}
	in := p.c.Info()
	if in.Caller.Extension != "" {
		return in.Caller.Extension
	}
	return in.From
}

// remoteURI is where in-dialog requests to the party go.
func (p party) remoteURI() sip.Uri {
	if p.leg != nil {
		d := p.leg.dialog
		if ct := d.InviteResponse.Contact(); ct != nil {
			return ct.Address
		}
		return d.InviteRequest.Recipient
	}
	return p.c.caller.InviteRequest.Contact().Address
}

// do sends an in-dialog request to the party and waits for its final
// response.
func (p party) do(ctx context.Context, req *sip.Request) (*sip.Response, error) {
	p.c.m.sip.DecorateRequest(req)
	if p.leg != nil {
		if dst := p.leg.target.Destination; dst.IsValid() {
			req.SetDestination(dst.String())
		}
		return p.leg.dialog.Do(ctx, req)
	}
	return p.c.caller.Do(ctx, req)
}

// readRequest checks an in-dialog request's CSeq against the party's
// dialog.
func (p party) readRequest(req *sip.Request, tx sip.ServerTransaction) error {
	if p.leg != nil {
		return p.leg.dialog.ReadRequest(req, tx)
	}
	return p.c.caller.ReadRequest(req, tx)
}

// readBye answers the party's BYE.
func (p party) readBye(req *sip.Request, tx sip.ServerTransaction) {
	var err error
	if p.leg != nil {
		err = p.leg.dialog.ReadBye(req, tx)
	} else {
		err = p.c.caller.ReadBye(req, tx)
	}
	if err != nil {
		respond(tx, req, sip.StatusOK, "OK")
	}
}

// held reports whether the call's media is on hold (the last offer or
// answer relayed said so).
func (c *Call) held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info.Held
}

// stopTimer stops the party's session timer (RFC 4028): it left, or its
// call ended.
func (p party) stopTimer() {
	if !p.valid() {
		return
	}
	st := p.c.timerOf(p.leg)
	st.mu.Lock()
	if st.t != nil {
		st.t.Stop()
	}
	st.interval = 0
	st.mu.Unlock()
}

// markEnded sets the end of the party's leg on the record, unless set.
func (p party) markEnded() {
	if p.leg == nil {
		return
	}
	p.c.mu.Lock()
	if p.leg.info.End.IsZero() {
		p.leg.info.End = time.Now()
	}
	p.c.mu.Unlock()
}

// hangup sends BYE to the party unless its dialog already ended.
func (p party) hangup() {
	if p.leg != nil {
		p.leg.bye()
		return
	}
	p.c.hangupCaller()
}

// reinvite sends a re-INVITE with body to the party (ACKing a 2xx) and
// returns the final status and the answer.
func (p party) reinvite(ctx context.Context, body []byte) (int, *sdp.Description, error) {
	if p.leg != nil {
		return p.leg.call.sendReInvite(ctx, false, p.leg, body)
	}
	return p.c.sendReInvite(ctx, true, nil, body)
}

// notifyRefer sends the NOTIFY of a REFER's implicit subscription (RFC
// 3515 section 2.4.4) with a message/sipfrag status line (section
// 2.4.5); final ends the subscription.
func (p party) notifyRefer(status int, final bool) {
	req := sip.NewRequest(sip.NOTIFY, p.remoteURI())
	req.AppendHeader(sip.NewHeader("Event", "refer"))
	state := "active;expires=60"
	if final {
		state = "terminated;reason=noresource"
	}
	req.AppendHeader(sip.NewHeader("Subscription-State", state))
	ep := p.endpoint()
	req.AppendHeader(sip.HeaderClone(&ep.Contact))
	req.AppendHeader(sip.NewHeader("Content-Type", "message/sipfrag;version=2.0"))
	req.SetBody(fmt.Appendf(nil, "SIP/2.0 %d %s\r\n", status, sipcore.Phrase(status)))
	ctx, cancel := context.WithTimeout(context.Background(), byeTimeout)
	defer cancel()
	res, err := p.do(ctx, req)
	if err != nil {
		p.c.log.Debug("refer notify", "status", status, "err", err)
		return
	}
	if !res.IsSuccess() {
		p.c.log.Debug("refer notify refused", "status", status, "answer", res.StatusCode)
	}
}
