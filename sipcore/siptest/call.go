package siptest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
)

// Call is one call of a phone, incoming or outgoing.
type Call struct {
	p       *Phone
	Invite  *sip.Request
	ds      *sipgo.DialogServerSession
	dc      *sipgo.DialogClientSession
	media   *Media
	mu      sync.Mutex
	final   int
	err     error
	ringing chan struct{}

	answered  chan struct{}
	cancelled chan struct{}
	ended     chan struct{}
	done      chan struct{} // outgoing: final response known
	reinvites chan *SDP
	infos     chan []byte

	early                                              chan struct{}
	ringOnce, endOnce, cancelOnce, doneOnce, earlyOnce sync.Once
	remoteBye                                          bool
}

func newCall(p *Phone, req *sip.Request) *Call {
	return &Call{p: p, Invite: req, ringing: make(chan struct{}), answered: make(chan struct{}), cancelled: make(chan struct{}),
		ended: make(chan struct{}), done: make(chan struct{}), reinvites: make(chan *SDP, 8), early: make(chan struct{}), infos: make(chan []byte, 8)}
}

func (c *Call) dial(ctx context.Context) {
	dua := &sipgo.DialogUA{Client: c.p.client, ContactHDR: c.p.contact}
	d, err := dua.WriteInvite(ctx, c.Invite)
	if err != nil {
		c.finish(0, err)
		return
	}
	c.dc = d
	err = d.WaitAnswer(ctx, sipgo.AnswerOptions{
		Username: c.p.opts.Username, Password: c.p.opts.Password,
		OnResponse: func(r *sip.Response) error {
			if r.StatusCode == 183 && len(r.Body()) > 0 {
				if s, err := ParseSDP(r.Body()); err == nil {
					c.media.setRemote(s.Addr)
					c.earlyOnce.Do(func() { close(c.early) })
				}
			}
			if r.StatusCode == 180 || r.StatusCode == 183 {
				c.ringOnce.Do(func() { close(c.ringing) })
			}
			return nil
		},
	})
	if err != nil {
		status := 0
		if d.InviteResponse != nil {
			status = d.InviteResponse.StatusCode
		}
		var dr *sipgo.ErrDialogResponse
		if errors.As(err, &dr) {
			status = dr.Res.StatusCode
		}
		c.finish(status, err)
		return
	}
	if err := d.Ack(context.Background()); err != nil {
		c.finish(200, fmt.Errorf("ack: %w", err))
		return
	}
	if ans, err := ParseSDP(d.InviteResponse.Body()); err == nil {
		c.media.setRemote(ans.Addr)
	}
	c.p.addCall(d.ID, c)
	close(c.answered)
	c.finish(200, nil)
	go func() {
		<-d.Context().Done()
		c.markEnded(false)
	}()
}

func (c *Call) finish(status int, err error) {
	c.mu.Lock()
	c.final, c.err = status, err
	c.mu.Unlock()
	c.doneOnce.Do(func() { close(c.done) })
}

func (c *Call) setFinal(status int) {
	c.mu.Lock()
	c.final = status
	c.mu.Unlock()
}

func (c *Call) markEnded(remote bool) {
	c.mu.Lock()
	if remote {
		c.remoteBye = true
	}
	c.mu.Unlock()
	c.endOnce.Do(func() { close(c.ended) })
}

func (c *Call) markCancelled() {
	c.cancelOnce.Do(func() { close(c.cancelled) })
}

// Ringing is closed when a 180/183 arrived (outgoing calls).
func (c *Call) Ringing() <-chan struct{} { return c.ringing }

// EarlyMedia is closed when a 183 with SDP was sent (incoming) or received
// (outgoing); Media is usable from then on.
func (c *Call) EarlyMedia() <-chan struct{} { return c.early }

// Answered is closed when the call was answered.
func (c *Call) Answered() <-chan struct{} { return c.answered }

// Cancelled is closed when an incoming call was cancelled before answer.
func (c *Call) Cancelled() <-chan struct{} { return c.cancelled }

// Ended is closed when an answered call ended (BYE either way).
func (c *Call) Ended() <-chan struct{} { return c.ended }

// Done is closed when an outgoing call got its final response.
func (c *Call) Done() <-chan struct{} { return c.done }

// ReInvites delivers the SDP offers of re-INVITEs the phone received.
func (c *Call) ReInvites() <-chan *SDP { return c.reinvites }

// Infos delivers the bodies of INFO requests the phone received.
func (c *Call) Infos() <-chan []byte { return c.infos }

// SendInfo sends an INFO with body and content type inside the dialog and
// returns the final status.
func (c *Call) SendInfo(ctx context.Context, contentType string, body []byte) (int, error) {
	var uri sip.Uri
	if c.dc != nil {
		uri = c.dc.InviteResponse.Contact().Address
	} else {
		uri = c.ds.InviteRequest.Contact().Address
	}
	req := sip.NewRequest(sip.INFO, uri)
	req.SetDestination(c.p.opts.PBX.String())
	req.AppendHeader(sip.NewHeader("Content-Type", contentType))
	req.SetBody(body)
	var res *sip.Response
	var err error
	if c.dc != nil {
		res, err = c.dc.Do(ctx, req)
	} else {
		res, err = c.ds.Do(ctx, req)
	}
	if err != nil {
		return 0, err
	}
	return res.StatusCode, nil
}

// Final returns the final status and error of an outgoing call (after Done)
// or the status an incoming call was answered with.
func (c *Call) Final() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.final, c.err
}

// RemoteHangup reports whether the far end sent BYE.
func (c *Call) RemoteHangup() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remoteBye
}

// Media returns the call's RTP endpoint (nil before answer).
func (c *Call) Media() *Media { return c.media }

// Hangup sends BYE.
func (c *Call) Hangup(ctx context.Context) error {
	defer c.markEnded(false)
	if c.ds != nil {
		return c.ds.Bye(ctx)
	}
	if c.dc != nil {
		return c.dc.Bye(ctx)
	}
	return errors.New("call not established")
}

// ReInvite sends a re-INVITE with the phone's SDP and direction
// ("sendonly" to hold, "sendrecv" to resume) and returns the answer.
func (c *Call) ReInvite(ctx context.Context, direction string) (*sip.Response, *SDP, error) {
	var uri sip.Uri
	if c.dc != nil {
		uri = c.dc.InviteResponse.Contact().Address
	} else {
		uri = c.ds.InviteRequest.Contact().Address
	}
	req := sip.NewRequest(sip.INVITE, uri)
	req.SetDestination(c.p.opts.PBX.String())
	req.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
	req.SetBody(BuildSDP(c.media.Port(), []uint8{c.media.pt}, direction))
	var res *sip.Response
	var err error
	if c.dc != nil {
		res, err = c.dc.Do(ctx, req)
	} else {
		res, err = c.ds.Do(ctx, req)
	}
	if err != nil {
		return nil, nil, err
	}
	if res.IsSuccess() {
		ack := sip.NewRequest(sip.ACK, uri)
		ack.SetDestination(c.p.opts.PBX.String())
		if c.dc != nil {
			err = c.dc.WriteAck(ctx, ack)
		} else {
			err = c.ds.WriteRequest(ack)
		}
		if err != nil {
			return res, nil, fmt.Errorf("ack: %w", err)
		}
		ans, err := ParseSDP(res.Body())
		if err == nil && ans.Addr.IsValid() {
			c.media.setRemote(ans.Addr)
		}
		return res, ans, err
	}
	return res, nil, nil
}
