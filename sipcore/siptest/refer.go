package siptest

import (
	"context"
	"fmt"
	"net/url"

	"github.com/emiago/sipgo/sip"
)

// Refer sends a REFER (RFC 3515) in the call's dialog with Refer-To
// referTo (a full URI, e.g. sip:103@acme.example) and extra headers, and
// returns the final response.
func (c *Call) Refer(ctx context.Context, referTo string, headers ...sip.Header) (*sip.Response, error) {
	var ruri sip.Uri
	if c.dc != nil {
		ruri = c.dc.InviteRequest.Recipient
		if ct := c.dc.InviteResponse.Contact(); ct != nil {
			ruri = ct.Address
		}
	} else {
		ruri = c.ds.InviteRequest.Contact().Address
	}
	req := sip.NewRequest(sip.REFER, ruri)
	req.AppendHeader(sip.NewHeader("Refer-To", "<"+referTo+">"))
	req.AppendHeader(sip.NewHeader("Referred-By", "<"+aorString(c.p)+">"))
	for _, h := range headers {
		req.AppendHeader(h)
	}
	if c.dc != nil {
		return c.dc.Do(ctx, req)
	}
	return c.ds.Do(ctx, req)
}

// ReplacesURI is the Refer-To of an attended transfer: target with this
// call's dialog in an embedded Replaces header (RFC 3891).
func (c *Call) ReplacesURI(target string) string {
	return target + "?Replaces=" + url.QueryEscape(c.Replaces())
}

// Replaces names this call's dialog as a Replaces header value (RFC 3891):
// callid;to-tag=<the PBX's tag>;from-tag=<the phone's tag>, which is how
// the PBX matches it (section 6.1) whichever side sent the INVITE.
func (c *Call) Replaces() string {
	var callID, local, remote string
	if c.dc != nil {
		callID = c.dc.InviteRequest.CallID().Value()
		local, _ = c.dc.InviteRequest.From().Params.Get("tag")
		remote, _ = c.dc.InviteResponse.To().Params.Get("tag")
	} else {
		callID = c.ds.InviteRequest.CallID().Value()
		remote, _ = c.ds.InviteRequest.From().Params.Get("tag")
		local, _ = c.ds.InviteResponse.To().Params.Get("tag")
	}
	return fmt.Sprintf("%s;to-tag=%s;from-tag=%s", callID, remote, local)
}

// Notifies delivers the message/sipfrag bodies of the NOTIFYs the call's
// dialog received (a REFER's progress).
func (c *Call) Notifies() <-chan string { return c.notifies }

func (p *Phone) onNotify(req *sip.Request, tx sip.ServerTransaction) {
	if p.onSubscriptionNotify(req, tx) {
		return
	}
	c := p.findCall(req)
	if c == nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil))
		return
	}
	select {
	case c.notifies <- string(req.Body()):
	default:
	}
	_ = tx.Respond(sip.NewResponseFromRequest(req, 200, "OK", nil))
}

func aorString(p *Phone) string {
	u := p.aor()
	return u.String()
}
