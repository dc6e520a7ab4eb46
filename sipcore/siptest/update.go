package siptest

import (
	"context"

	"github.com/emiago/sipgo/sip"
)

// SendUpdate sends an UPDATE (RFC 3311) inside the dialog, with body as SDP
// when not nil, and returns the final response. An answer's address
// becomes the phone's RTP remote.
func (c *Call) SendUpdate(ctx context.Context, body []byte) (*sip.Response, error) {
	var uri sip.Uri
	if c.dc != nil {
		uri = c.dc.InviteResponse.Contact().Address
	} else {
		uri = c.ds.InviteRequest.Contact().Address
	}
	req := sip.NewRequest(sip.UPDATE, uri)
	req.SetDestination(c.p.opts.PBX.String())
	if body != nil {
		req.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
		req.SetBody(body)
	}
	var res *sip.Response
	var err error
	if c.dc != nil {
		res, err = c.dc.Do(ctx, req)
	} else {
		res, err = c.ds.Do(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	if ans, perr := ParseSDP(res.Body()); perr == nil && ans.Addr.IsValid() && c.media != nil {
		c.media.setRemote(ans.Addr)
	}
	return res, nil
}
