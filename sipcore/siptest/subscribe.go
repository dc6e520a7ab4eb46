package siptest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"
)

// Subscription is a phone's event subscription dialog (RFC 6665), as a
// subscriber: it sends SUBSCRIBEs and receives the NOTIFYs.
type Subscription struct {
	p        *Phone
	event    string
	notifies chan *sip.Request

	mu     sync.Mutex
	req    *sip.Request // the last SUBSCRIBE
	toTag  string
	status int // answer to NOTIFYs; 0 means 200
}

// subscriptions is the phone's subscriptions by Call-ID.
type subscriptions struct {
	mu sync.Mutex
	m  map[string]*Subscription
}

var phoneSubs sync.Map // *Phone -> *subscriptions

func (p *Phone) subs() *subscriptions {
	v, loaded := phoneSubs.LoadOrStore(p, &subscriptions{m: map[string]*Subscription{}})
	if !loaded {
		p.t.Cleanup(func() { phoneSubs.Delete(p) })
	}
	return v.(*subscriptions)
}

// SubscribeRequest builds a SUBSCRIBE for event to user at the phone's
// domain for expires seconds (negative: no Expires header), without
// sending it.
func (p *Phone) SubscribeRequest(user, event string, expires int) *sip.Request {
	ruri := sip.Uri{Scheme: "sip", User: user, Host: p.opts.Domain}
	req := p.newRequest(sip.SUBSCRIBE, ruri)
	from := &sip.FromHeader{Address: p.aor()}
	from.Params.Add("tag", sip.GenerateTagN(10))
	req.AppendHeader(from)
	req.AppendHeader(&sip.ToHeader{Address: ruri})
	cid := sip.CallIDHeader(sip.GenerateTagN(20))
	req.AppendHeader(&cid)
	req.AppendHeader(&sip.CSeqHeader{SeqNo: 1, MethodName: sip.SUBSCRIBE})
	req.AppendHeader(sip.HeaderClone(&p.contact))
	req.AppendHeader(sip.NewHeader("Event", event))
	if event == "message-summary" {
		req.AppendHeader(sip.NewHeader("Accept", "application/simple-message-summary"))
	}
	if expires >= 0 {
		req.AppendHeader(sip.NewHeader("Expires", strconv.Itoa(expires)))
	}
	return req
}

// Subscribe subscribes to event of user (e.g. "message-summary" of "100"),
// answering one challenge with the phone's credentials. The subscription
// receives NOTIFYs from before the answer; a non-2xx answer returns it
// too, unusable for refreshes.
func (p *Phone) Subscribe(ctx context.Context, user, event string, expires int) (*Subscription, *sip.Response, error) {
	return p.SubscribeWith(ctx, p.SubscribeRequest(user, event, expires))
}

// SubscribeWith is Subscribe with a request from SubscribeRequest, changed
// by the caller (another Contact, for instance).
func (p *Phone) SubscribeWith(ctx context.Context, req *sip.Request) (*Subscription, *sip.Response, error) {
	event := ""
	if h := req.GetHeader("Event"); h != nil {
		event = h.Value()
	}
	s := &Subscription{p: p, event: event, notifies: make(chan *sip.Request, 32), req: req}
	subs := p.subs()
	subs.mu.Lock()
	subs.m[req.CallID().Value()] = s
	subs.mu.Unlock()
	res, err := p.SendAuth(ctx, req)
	if err != nil {
		return s, nil, err
	}
	if tag, ok := res.To().Params.Get("tag"); ok {
		s.mu.Lock()
		s.toTag = tag
		s.mu.Unlock()
	}
	return s, res, nil
}

// Refresh sends a SUBSCRIBE in the dialog for expires seconds (0 ends the
// subscription) and returns the answer.
func (s *Subscription) Refresh(ctx context.Context, expires int) (*sip.Response, error) {
	s.mu.Lock()
	prev := s.req
	if s.toTag == "" {
		s.mu.Unlock()
		return nil, fmt.Errorf("subscription has no dialog")
	}
	req := s.p.newRequest(sip.SUBSCRIBE, prev.Recipient)
	req.AppendHeader(sip.HeaderClone(prev.From()))
	to := &sip.ToHeader{Address: prev.To().Address}
	to.Params.Add("tag", s.toTag)
	req.AppendHeader(to)
	req.AppendHeader(sip.HeaderClone(prev.CallID()))
	req.AppendHeader(&sip.CSeqHeader{SeqNo: prev.CSeq().SeqNo + 1, MethodName: sip.SUBSCRIBE})
	req.AppendHeader(sip.HeaderClone(&s.p.contact))
	req.AppendHeader(sip.NewHeader("Event", s.event))
	req.AppendHeader(sip.NewHeader("Expires", strconv.Itoa(expires)))
	s.req = req
	s.mu.Unlock()
	return s.p.client.Do(ctx, req)
}

// SetNotifyStatus makes the phone answer later NOTIFYs of the subscription
// with status (481 to forget it, for instance); 0 means 200.
func (s *Subscription) SetNotifyStatus(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// Notifies delivers every NOTIFY of the subscription.
func (s *Subscription) Notifies() <-chan *sip.Request { return s.notifies }

// NextNotify returns the next NOTIFY or fails the test after d.
func (s *Subscription) NextNotify(d time.Duration) *sip.Request {
	s.p.t.Helper()
	select {
	case n := <-s.notifies:
		return n
	case <-time.After(d):
		s.p.t.Fatalf("phone %s: no NOTIFY within %s", s.p.opts.Username, d)
		return nil
	}
}

// onSubscriptionNotify answers a NOTIFY of one of the phone's
// subscriptions; false when it belongs to none.
func (p *Phone) onSubscriptionNotify(req *sip.Request, tx sip.ServerTransaction) bool {
	if req.CallID() == nil {
		return false
	}
	subs := p.subs()
	subs.mu.Lock()
	s := subs.m[req.CallID().Value()]
	subs.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	status := s.status
	if status == 0 {
		status = 200
	}
	if s.toTag == "" {
		// A NOTIFY overtaking the 2xx (RFC 6665 section 4.1.2.4).
		s.toTag, _ = req.From().Params.Get("tag")
	}
	s.mu.Unlock()
	select {
	case s.notifies <- req:
	default:
	}
	_ = tx.Respond(sip.NewResponseFromRequest(req, status, "Reply", nil))
	return true
}
