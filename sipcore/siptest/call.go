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
	// reinviteReqs are the re-INVITE requests themselves.
	reinviteReqs chan *sip.Request
	updates      chan *sip.Request // UPDATE requests received
	infos        chan []byte
	notifies     chan string       // sipfrag bodies of NOTIFYs (refer.go)
	acks         chan *sip.Request // ACKs received for the call's dialog

	// lastReInvite is the transaction and 2xx of the latest re-INVITE the
	// phone answered, for RepeatReInviteAnswer.
	lastReInviteTx  sip.ServerTransaction
	lastReInvite2xx *sip.Response

	late        *lateOffer // the INVITE went without SDP
	earlyStatus int        // status of the provisional that carried SDP
	offer2xx    *SDP       // late offer: the offer the 2xx carried

	early                                              chan struct{}
	ringOnce, endOnce, cancelOnce, doneOnce, earlyOnce sync.Once
	remoteBye                                          bool
}

// lateOffer says how a late-offer call answers the 2xx's offer.
type lateOffer struct {
	answer bool // put an SDP answer in the ACK
}

func newCall(p *Phone, req *sip.Request) *Call {
	return &Call{p: p, Invite: req, ringing: make(chan struct{}), answered: make(chan struct{}), cancelled: make(chan struct{}),
		ended: make(chan struct{}), done: make(chan struct{}), reinvites: make(chan *SDP, 8), early: make(chan struct{}), infos: make(chan []byte, 8),
		acks: make(chan *sip.Request, 16), reinviteReqs: make(chan *sip.Request, 8), updates: make(chan *sip.Request, 8), notifies: make(chan string, 8)}
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
			if (r.StatusCode == 183 || r.StatusCode == 180) && len(r.Body()) > 0 && c.late == nil {
				if s, err := ParseSDP(r.Body()); err == nil {
					c.media.setRemote(s.Addr)
					c.earlyOnce.Do(func() {
						c.mu.Lock()
						c.earlyStatus = r.StatusCode
						c.mu.Unlock()
						close(c.early)
					})
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
	// Known before the ACK leaves: the far end may send BYE right after.
	c.p.addCall(d.ID, c)
	if c.late != nil {
		err = c.ackLateOffer(d)
	} else {
		err = d.Ack(context.Background())
	}
	if err != nil {
		c.finish(200, fmt.Errorf("ack: %w", err))
		return
	}
	if ans, err := ParseSDP(d.InviteResponse.Body()); err == nil {
		c.media.setRemote(ans.Addr)
	}
	close(c.answered)
	c.finish(200, nil)
	go func() {
		<-d.Context().Done()
		c.markEnded(false)
	}()
}

// ackLateOffer ACKs the 2xx of a late-offer INVITE, with the answer to
// its offer when the call is set to answer.
func (c *Call) ackLateOffer(d *sipgo.DialogClientSession) error {
	offer, err := ParseSDP(d.InviteResponse.Body())
	c.mu.Lock()
	c.offer2xx = offer
	c.mu.Unlock()
	uri := d.InviteRequest.Recipient
	if ct := d.InviteResponse.Contact(); ct != nil {
		uri = ct.Address
	}
	ack := sip.NewRequest(sip.ACK, uri)
	ack.SetDestination(c.p.opts.PBX.String())
	if c.late.answer && err == nil {
		common := intersect(offer.Codecs, c.p.opts.Codecs)
		ack.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
		ack.SetBody(BuildSDPEvent(c.media.Port(), common, "sendrecv", c.p.te()))
	}
	return d.WriteAck(context.Background(), ack)
}

// EarlyStatus is the status of the provisional response that brought
// early media to an outgoing call (180 or 183), zero without.
func (c *Call) EarlyStatus() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.earlyStatus
}

// OfferIn2xx is the offer a late-offer call got in the 2xx (nil before).
func (c *Call) OfferIn2xx() *SDP {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offer2xx
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

// ReInviteRequests delivers the re-INVITE requests the phone received
// (their headers: Session-Expires, for instance).
func (c *Call) ReInviteRequests() <-chan *sip.Request { return c.reinviteReqs }

// Forget makes the phone lose the call's dialog, as a rebooted phone does:
// requests inside it get 481 from then on.
func (c *Call) Forget() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for id, x := range c.p.calls {
		if x == c {
			delete(c.p.calls, id)
		}
	}
}

// Updates delivers the UPDATE requests the phone received.
func (c *Call) Updates() <-chan *sip.Request { return c.updates }

// Response is the 2xx that answered an outgoing call (nil before).
func (c *Call) Response() *sip.Response {
	if c.dc == nil {
		return nil
	}
	return c.dc.InviteResponse
}

// Infos delivers the bodies of INFO requests the phone received.
func (c *Call) Infos() <-chan []byte { return c.infos }

// SendInfo sends an INFO with body and content type inside the dialog and
// returns the final status.
func (c *Call) SendInfo(ctx context.Context, contentType string, body []byte) (int, error) {
	req := c.inDialog(sip.INFO, contentType, body)
	res, err := c.do(ctx, req)
	if err != nil {
		return 0, err
	}
	return res.StatusCode, nil
}

// inDialog is a request of method inside the call's dialog, toward the far
// end's Contact through the PBX, with body of contentType when body is not
// nil.
func (c *Call) inDialog(method sip.RequestMethod, contentType string, body []byte) *sip.Request {
	var uri sip.Uri
	if c.dc != nil {
		uri = c.dc.InviteResponse.Contact().Address
	} else {
		uri = c.ds.InviteRequest.Contact().Address
	}
	req := sip.NewRequest(method, uri)
	req.SetDestination(c.p.opts.PBX.String())
	if body != nil {
		req.AppendHeader(sip.NewHeader("Content-Type", contentType))
		req.SetBody(body)
	}
	return req
}

// do sends req in the call's dialog and returns the final response.
func (c *Call) do(ctx context.Context, req *sip.Request) (*sip.Response, error) {
	if c.dc != nil {
		return c.dc.Do(ctx, req)
	}
	return c.ds.Do(ctx, req)
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
	ri, err := c.StartReInvite(ctx, BuildSDP(c.media.Port(), []uint8{c.media.pt}, direction))
	if err != nil {
		return nil, nil, err
	}
	res, err := ri.Final(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !res.IsSuccess() {
		return res, nil, nil
	}
	if err := ri.Ack(ctx, nil); err != nil {
		return res, nil, err
	}
	ans, err := ParseSDP(res.Body())
	if err == nil && ans.Addr.IsValid() {
		c.media.setRemote(ans.Addr)
	}
	return res, ans, err
}

// ReInviteTx is a re-INVITE the phone sent, driven step by step: the test
// decides when (and whether) to ACK its 2xx.
type ReInviteTx struct {
	c       *Call
	uri     sip.Uri
	tx      sip.ClientTransaction
	retrans chan *sip.Response
}

// StartReInvite sends a re-INVITE with body as SDP (nil: no offer, RFC 3261
// section 14.1 lets the answerer offer in its 2xx) and returns without
// waiting for the answer.
func (c *Call) StartReInvite(ctx context.Context, body []byte) (*ReInviteTx, error) {
	req := c.inDialog(sip.INVITE, "application/sdp", body)
	req.SetBody(body)
	var tx sip.ClientTransaction
	var err error
	if c.dc != nil {
		tx, err = c.dc.TransactionRequest(ctx, req)
	} else {
		tx, err = c.ds.TransactionRequest(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	ri := &ReInviteTx{c: c, uri: req.Recipient, tx: tx, retrans: make(chan *sip.Response, 16)}
	tx.OnRetransmission(func(r *sip.Response) {
		select {
		case ri.retrans <- r:
		default:
		}
	})
	return ri, nil
}

// Final waits for the final response.
func (ri *ReInviteTx) Final(ctx context.Context) (*sip.Response, error) {
	for {
		select {
		case res := <-ri.tx.Responses():
			if res.IsProvisional() {
				continue
			}
			return res, nil
		case <-ri.tx.Done():
			return nil, ri.tx.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Retransmissions delivers every retransmission of the 2xx.
func (ri *ReInviteTx) Retransmissions() <-chan *sip.Response { return ri.retrans }

// Ack sends the ACK for the 2xx, with body (the SDP answer to an offer in
// the 2xx) when not nil.
func (ri *ReInviteTx) Ack(ctx context.Context, body []byte) error {
	c := ri.c
	ack := sip.NewRequest(sip.ACK, ri.uri)
	ack.SetDestination(c.p.opts.PBX.String())
	if body != nil {
		ack.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
		ack.SetBody(body)
	}
	var err error
	if c.dc != nil {
		err = c.dc.WriteAck(ctx, ack)
	} else {
		err = c.ds.WriteRequest(ack)
	}
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	return nil
}

// Terminate ends the re-INVITE's client transaction: later 2xx
// retransmissions then reach no transaction.
func (ri *ReInviteTx) Terminate() { ri.tx.Terminate() }

// Acks delivers the ACKs the phone received in the call's dialog.
func (c *Call) Acks() <-chan *sip.Request { return c.acks }

// RepeatReInviteAnswer sends the 2xx of the latest re-INVITE the phone
// answered once more, as a phone whose ACK was lost does.
func (c *Call) RepeatReInviteAnswer() error {
	c.mu.Lock()
	tx, res := c.lastReInviteTx, c.lastReInvite2xx
	c.mu.Unlock()
	if tx == nil {
		return errors.New("no re-invite answered")
	}
	return tx.Respond(res)
}
