package siptest

import (
	"context"

	"github.com/emiago/sipgo/sip"
)

// SendUpdate sends an UPDATE (RFC 3311) inside the dialog, with body as SDP
// when not nil, and returns the final response. An answer's address
// becomes the phone's RTP remote.
func (c *Call) SendUpdate(ctx context.Context, body []byte) (*sip.Response, error) {
	res, err := c.do(ctx, c.inDialog(sip.UPDATE, "application/sdp", body))
	if err != nil {
		return nil, err
	}
	if ans, perr := ParseSDP(res.Body()); perr == nil && ans.Addr.IsValid() && c.media != nil {
		c.media.setRemote(ans.Addr)
	}
	return res, nil
}
