package siptest

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
)

// Mode says how a phone answers an incoming INVITE.
type Mode int

const (
	// Answer rings, then answers with SDP after Behaviour.Delay.
	Answer Mode = iota
	// Ring rings forever (until cancelled).
	Ring
	// Reject rings, then answers Behaviour.Status (default 486 Busy Here)
	// after Behaviour.Delay.
	Reject
)

// Behaviour of a phone toward incoming calls.
type Behaviour struct {
	Mode   Mode
	Delay  time.Duration // before the final answer
	Status int           // for Reject
	// Codecs the phone accepts when answering (payload types); empty means
	// the phone's own codecs.
	Codecs []uint8
	// EarlyMedia sends 183 Session Progress with SDP instead of 180; the
	// call's Media is usable from then on.
	EarlyMedia bool
	// EarlyStatus is the provisional status carrying early media: 183
	// (default) or 180, as carriers playing ringback send.
	EarlyStatus int
	// AnswerHeaders are added to the final answer to the INVITE (a
	// Session-Expires on the 200, a Min-SE on a 422, for instance).
	AnswerHeaders []sip.Header
}

// Options configures a Phone.
type Options struct {
	Transport string // "udp" (default) or "tcp"
	Username  string
	Password  string
	Domain    string         // SIP domain (To/From host, realm)
	PBX       netip.AddrPort // where requests go
	// Codecs are the payload types offered, in order; default PCMU, PCMA.
	Codecs []uint8
	// TelephoneEvent is the RFC 4733 payload type the phone offers and
	// answers with; zero means 101.
	TelephoneEvent uint8
	// NoTelephoneEvent leaves telephone-event out of offers and answers
	// (a phone that sends DTMF as SIP INFO only).
	NoTelephoneEvent bool
	Log              *slog.Logger
}

// Phone is a SIP user agent on a loopback socket.
type Phone struct {
	t      testing.TB
	opts   Options
	log    *slog.Logger
	ua     *sipgo.UserAgent
	srv    *sipgo.Server
	client *sipgo.Client
	addr   netip.AddrPort
	served chan struct{}

	options atomic.Int64 // OPTIONS received

	contact sip.ContactHeader

	mu        sync.Mutex
	behaviour Behaviour
	calls     map[string]*Call // by dialog id
	incoming  chan *Call
	regReq    *sip.Request // kept so refreshes reuse Call-ID and CSeq
	medias    []*Media
}

// NewPhone starts a phone listening on 127.0.0.1 (port 0). It stops when the
// test ends.
func NewPhone(t testing.TB, opts Options) *Phone {
	t.Helper()
	if opts.Transport == "" {
		opts.Transport = "udp"
	}
	opts.Transport = strings.ToLower(opts.Transport)
	if len(opts.Codecs) == 0 {
		opts.Codecs = []uint8{0, 8}
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Phone{t: t, opts: opts, log: log, calls: map[string]*Call{}, incoming: make(chan *Call, 32), served: make(chan struct{})}
	ua, err := sipgo.NewUA(sipgo.WithUserAgent(opts.Username), sipgo.WithUserAgentHostname(opts.Domain),
		sipgo.WithUserAgentTransportLayerOptions(sip.WithTransportLayerLogger(log)),
		sipgo.WithUserAgentTransactionLayerOptions(sip.WithTransactionLayerLogger(log)))
	if err != nil {
		t.Fatalf("phone ua: %v", err)
	}
	p.ua = ua
	p.srv, err = sipgo.NewServer(ua, sipgo.WithServerLogger(log))
	if err != nil {
		t.Fatalf("phone server: %v", err)
	}
	var serve func() error
	switch opts.Transport {
	case "udp":
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatalf("phone listen: %v", err)
		}
		p.addr = c.LocalAddr().(*net.UDPAddr).AddrPort()
		serve = func() error { return p.srv.ServeUDP(c) }
		p.client, err = sipgo.NewClient(ua, sipgo.WithClientHostname("127.0.0.1"), sipgo.WithClientPort(int(p.addr.Port())),
			sipgo.WithClientConnectionAddr(p.addr.String()), sipgo.WithClientLogger(log))
		if err != nil {
			t.Fatalf("phone client: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	case "tcp":
		ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatalf("phone listen: %v", err)
		}
		p.addr = ln.Addr().(*net.TCPAddr).AddrPort()
		serve = func() error { return p.srv.ServeTCP(ln) }
		p.client, err = sipgo.NewClient(ua, sipgo.WithClientHostname("127.0.0.1"), sipgo.WithClientPort(int(p.addr.Port())), sipgo.WithClientLogger(log))
		if err != nil {
			t.Fatalf("phone client: %v", err)
		}
		t.Cleanup(func() { ln.Close() })
	default:
		t.Fatalf("phone transport %q", opts.Transport)
	}
	p.contact = sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: opts.Username, Host: "127.0.0.1", Port: int(p.addr.Port())}}
	if opts.Transport == "tcp" {
		p.contact.Address.UriParams = sip.HeaderParams{{K: "transport", V: "tcp"}}
	}
	p.srv.OnInvite(p.onInvite)
	p.srv.OnAck(p.onAck)
	p.srv.OnBye(p.onBye)
	p.srv.OnInfo(p.onInfo)
	p.srv.OnUpdate(p.onUpdate)
	p.srv.OnNotify(p.onNotify)
	p.srv.OnOptions(func(req *sip.Request, tx sip.ServerTransaction) {
		p.options.Add(1)
		_ = tx.Respond(sip.NewResponseFromRequest(req, 200, "OK", nil))
	})
	go func() {
		defer close(p.served)
		_ = serve()
	}()
	t.Cleanup(p.Close)
	if opts.Transport == "udp" {
		// The client sends from the listening socket once sipgo knows it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c := ua.TransportLayer().Pool("udp").Get(p.addr.String())
			if c != nil {
				c.Ref(-1)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("phone udp listener not serving")
			}
			time.Sleep(time.Millisecond)
		}
	}
	return p
}

// Close stops the phone and closes its calls' RTP sockets.
func (p *Phone) Close() {
	_ = p.ua.Close()
	p.mu.Lock()
	medias := p.medias
	p.medias = nil
	p.mu.Unlock()
	for _, m := range medias {
		_ = m.Close()
	}
}

func (p *Phone) newMedia(pt uint8) (*Media, error) {
	m, err := newMedia(pt)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.medias = append(p.medias, m)
	p.mu.Unlock()
	return m, nil
}

// SetTelephoneEvent sets the telephone-event payload type of later offers and
// answers.
func (p *Phone) SetTelephoneEvent(pt uint8) {
	p.mu.Lock()
	p.opts.TelephoneEvent = pt
	p.mu.Unlock()
}

// SetNoTelephoneEvent leaves telephone-event out of later offers and
// answers (on) or puts it back.
func (p *Phone) SetNoTelephoneEvent(on bool) {
	p.mu.Lock()
	p.opts.NoTelephoneEvent = on
	p.mu.Unlock()
}

// te is the telephone-event payload type to offer; 0 means none.
func (p *Phone) te() uint8 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.opts.NoTelephoneEvent {
		return 0
	}
	if p.opts.TelephoneEvent == 0 {
		return 101
	}
	return p.opts.TelephoneEvent
}

// OptionsReceived is how many OPTIONS requests the phone has answered.
func (p *Phone) OptionsReceived() int64 { return p.options.Load() }

// Addr is the phone's listening address.
func (p *Phone) Addr() netip.AddrPort { return p.addr }

// Contact is the phone's Contact URI.
func (p *Phone) Contact() string { return p.contact.Address.String() }

// SetBehaviour changes how the phone answers incoming calls.
func (p *Phone) SetBehaviour(b Behaviour) {
	p.mu.Lock()
	p.behaviour = b
	p.mu.Unlock()
}

// Incoming delivers every new incoming call (including those later
// cancelled).
func (p *Phone) Incoming() <-chan *Call { return p.incoming }

// WaitIncoming returns the next incoming call or fails the test after d.
func (p *Phone) WaitIncoming(d time.Duration) *Call {
	p.t.Helper()
	select {
	case c := <-p.incoming:
		return c
	case <-time.After(d):
		p.t.Fatalf("phone %s: no incoming call within %s", p.opts.Username, d)
		return nil
	}
}

func (p *Phone) aor() sip.Uri {
	return sip.Uri{Scheme: "sip", User: p.opts.Username, Host: p.opts.Domain}
}

func (p *Phone) newRequest(method sip.RequestMethod, ruri sip.Uri) *sip.Request {
	req := sip.NewRequest(method, ruri)
	req.SetDestination(p.opts.PBX.String())
	req.SetTransport(strings.ToUpper(p.opts.Transport))
	if method == sip.INVITE {
		// An outbound proxy route: the CANCEL sipgo builds copies Route,
		// not the destination, and must not resolve the domain.
		route := &sip.RouteHeader{Address: sip.Uri{Scheme: "sip", Host: p.opts.PBX.Addr().String(), Port: int(p.opts.PBX.Port()),
			UriParams: sip.HeaderParams{{K: "lr", V: ""}}}}
		if p.opts.Transport == "tcp" {
			route.Address.UriParams = append(route.Address.UriParams, sip.HeaderKV{K: "transport", V: "tcp"})
		}
		req.AppendHeader(route)
	}
	return req
}

// RegisterRequest builds a REGISTER for expires seconds (negative: no
// Expires header) without sending it; the Contact may be replaced.
func (p *Phone) RegisterRequest(expires int) *sip.Request {
	req := p.newRequest(sip.REGISTER, sip.Uri{Scheme: "sip", Host: p.opts.Domain})
	from := &sip.FromHeader{Address: p.aor()}
	from.Params.Add("tag", sip.GenerateTagN(10))
	req.AppendHeader(from)
	req.AppendHeader(&sip.ToHeader{Address: p.aor()})
	req.AppendHeader(sip.HeaderClone(&p.contact))
	if expires >= 0 {
		req.AppendHeader(sip.NewHeader("Expires", strconv.Itoa(expires)))
	}
	req.AppendHeader(sip.NewHeader("User-Agent", "siptest"))
	return req
}

// Send sends req as is and returns the final response, without
// authentication.
func (p *Phone) Send(ctx context.Context, req *sip.Request) (*sip.Response, error) {
	return p.client.Do(ctx, req)
}

// SendAuth sends req and answers one 401/407 challenge with the phone's
// credentials.
func (p *Phone) SendAuth(ctx context.Context, req *sip.Request) (*sip.Response, error) {
	res, err := p.client.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode == sip.StatusUnauthorized || res.StatusCode == sip.StatusProxyAuthRequired {
		return p.client.DoDigestAuth(ctx, req, res, sipgo.DigestAuth{Username: p.opts.Username, Password: p.opts.Password})
	}
	return res, nil
}

// Register registers the phone's Contact for expires seconds and returns
// the final response. Refreshes reuse the Call-ID.
func (p *Phone) Register(ctx context.Context, expires int) (*sip.Response, error) {
	req := p.RegisterRequest(expires)
	p.mu.Lock()
	if prev := p.regReq; prev != nil {
		req.ReplaceHeader(sip.HeaderClone(prev.CallID()))
		cs := prev.CSeq()
		req.AppendHeader(&sip.CSeqHeader{SeqNo: cs.SeqNo + 1, MethodName: sip.REGISTER})
	}
	p.mu.Unlock()
	if req.CallID() == nil {
		cid := sip.CallIDHeader(sip.GenerateTagN(20))
		req.AppendHeader(&cid)
	}
	if req.CSeq() == nil {
		req.AppendHeader(&sip.CSeqHeader{SeqNo: 1, MethodName: sip.REGISTER})
	}
	res, err := p.SendAuth(ctx, req)
	p.mu.Lock()
	p.regReq = req
	p.mu.Unlock()
	return res, err
}

// MustRegister registers or fails the test.
func (p *Phone) MustRegister(ctx context.Context, expires int) *sip.Response {
	p.t.Helper()
	res, err := p.Register(ctx, expires)
	if err != nil {
		p.t.Fatalf("phone %s register: %v", p.opts.Username, err)
	}
	if res.StatusCode != 200 {
		p.t.Fatalf("phone %s register: %s", p.opts.Username, res.StartLine())
	}
	return res
}

func (p *Phone) addCall(id string, c *Call) {
	p.mu.Lock()
	p.calls[id] = c
	p.mu.Unlock()
}

func (p *Phone) findCall(req *sip.Request) *Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, err := sip.DialogIDFromRequestUAS(req); err == nil {
		if c, ok := p.calls[id]; ok && c.ds != nil {
			return c
		}
	}
	if id, err := sip.DialogIDFromRequestUAC(req); err == nil {
		if c, ok := p.calls[id]; ok && c.dc != nil {
			return c
		}
	}
	return nil
}

func (p *Phone) onAck(req *sip.Request, tx sip.ServerTransaction) {
	c := p.findCall(req)
	if c == nil {
		return
	}
	select {
	case c.acks <- req:
	default:
	}
	if c.ds != nil {
		_ = c.ds.ReadAck(req, tx)
	}
}

func (p *Phone) onBye(req *sip.Request, tx sip.ServerTransaction) {
	c := p.findCall(req)
	if c == nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil))
		return
	}
	c.mu.Lock()
	c.remoteBye = true
	c.mu.Unlock()
	var err error
	if c.ds != nil {
		err = c.ds.ReadBye(req, tx)
	} else {
		err = c.dc.ReadBye(req, tx)
	}
	if err != nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 200, "OK", nil))
	}
	c.markEnded(true)
}

func (p *Phone) onInfo(req *sip.Request, tx sip.ServerTransaction) {
	c := p.findCall(req)
	if c == nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil))
		return
	}
	select {
	case c.infos <- append([]byte(nil), req.Body()...):
	default:
	}
	_ = tx.Respond(sip.NewResponseFromRequest(req, 200, "OK", nil))
}

// onUpdate answers an UPDATE without SDP (a session refresh) with 200 and
// the request's Session-Expires.
func (p *Phone) onUpdate(req *sip.Request, tx sip.ServerTransaction) {
	c := p.findCall(req)
	if c == nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil))
		return
	}
	select {
	case c.updates <- req:
	default:
	}
	res := sip.NewResponseFromRequest(req, 200, "OK", nil)
	if se := req.GetHeader("Session-Expires"); se != nil {
		res.AppendHeader(sip.NewHeader("Session-Expires", se.Value()))
	}
	_ = tx.Respond(res)
}

func (p *Phone) onInvite(req *sip.Request, tx sip.ServerTransaction) {
	if to := req.To(); to != nil && to.Params.Has("tag") {
		p.onReInvite(req, tx)
		return
	}
	p.mu.Lock()
	b := p.behaviour
	p.mu.Unlock()
	dua := &sipgo.DialogUA{Client: p.client, ContactHDR: p.contact}
	ds, err := dua.ReadInvite(req, tx)
	if err != nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 400, "Bad Request", nil))
		return
	}
	c := newCall(p, req)
	c.ds = ds
	p.addCall(ds.ID, c)
	select {
	case p.incoming <- c:
	default:
	}
	codecs := b.Codecs
	if len(codecs) == 0 {
		codecs = p.opts.Codecs
	}
	var offer *SDP
	var common []uint8
	if o, err := ParseSDP(req.Body()); err == nil {
		offer, common = o, intersect(o.Codecs, codecs)
	}
	if b.EarlyMedia && len(common) > 0 {
		media, err := p.newMedia(common[0])
		if err != nil {
			_ = ds.Respond(500, "Server Error", nil)
			return
		}
		c.media = media
		media.setRemote(offer.Addr)
		status, reason := 183, "Session Progress"
		if b.EarlyStatus == 180 {
			status, reason = 180, "Ringing"
		}
		_ = ds.Respond(status, reason, BuildSDPEvent(media.Port(), common, "sendrecv", p.te()), sip.NewHeader("Content-Type", "application/sdp"))
		close(c.early)
	} else {
		_ = ds.Respond(180, "Ringing", nil)
	}
	wait := func(d time.Duration) bool {
		if d <= 0 {
			return true
		}
		select {
		case <-time.After(d):
			return true
		case <-ds.Context().Done():
			return false
		}
	}
	switch b.Mode {
	case Ring:
		<-ds.Context().Done()
		c.markCancelled()
		return
	case Reject:
		if !wait(b.Delay) {
			c.markCancelled()
			return
		}
		status := b.Status
		if status == 0 {
			status = 486
		}
		c.setFinal(status)
		_ = ds.Respond(status, "Rejected", nil, b.AnswerHeaders...)
		return
	}
	if !wait(b.Delay) {
		c.markCancelled()
		return
	}
	if offer == nil || len(common) == 0 {
		c.setFinal(488)
		_ = ds.Respond(488, "Not Acceptable Here", nil)
		return
	}
	media := c.media
	if media == nil {
		var err error
		if media, err = p.newMedia(common[0]); err != nil {
			_ = ds.Respond(500, "Server Error", nil)
			return
		}
		c.media = media
		media.setRemote(offer.Addr)
	}
	c.setFinal(200)
	hdrs := append([]sip.Header{sip.NewHeader("Content-Type", "application/sdp")}, b.AnswerHeaders...)
	if err := ds.Respond(200, "OK", BuildSDPEvent(media.Port(), common, "sendrecv", p.te()), hdrs...); err != nil {
		p.log.Debug("answer", "err", err)
		return
	}
	close(c.answered)
	<-ds.Context().Done()
	c.markEnded(false)
}

func (p *Phone) onReInvite(req *sip.Request, tx sip.ServerTransaction) {
	c := p.findCall(req)
	if c == nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil))
		return
	}
	offer, err := ParseSDP(req.Body())
	if err != nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 488, "Not Acceptable Here", nil))
		return
	}
	if c.media != nil {
		c.media.setRemote(offer.Addr)
	}
	select {
	case c.reinvites <- offer:
	default:
	}
	select {
	case c.reinviteReqs <- req:
	default:
	}
	port := 0
	pt := []uint8{0}
	if c.media != nil {
		port = c.media.Port()
		pt = []uint8{c.media.pt}
	}
	res := sip.NewSDPResponseFromRequest(req, BuildSDP(port, pt, answerDirection(offer.Direction)))
	res.AppendHeader(sip.HeaderClone(&p.contact))
	c.mu.Lock()
	c.lastReInviteTx, c.lastReInvite2xx = tx, res
	c.mu.Unlock()
	_ = tx.Respond(res)
}

func answerDirection(d string) string {
	switch d {
	case "sendonly":
		return "recvonly"
	case "recvonly":
		return "sendonly"
	case "inactive":
		return "inactive"
	}
	return "sendrecv"
}

func intersect(offered, accepted []uint8) []uint8 {
	var out []uint8
	for _, a := range accepted {
		for _, o := range offered {
			if a == o {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// Dial calls target (user part, e.g. "102") at the phone's domain through
// the PBX, answering the PBX's 407 with the phone's credentials. It returns
// at once; the call's Final channel delivers the outcome. Cancelling ctx
// before answer sends CANCEL.
func (p *Phone) Dial(ctx context.Context, target string) *Call {
	return p.DialWith(ctx, target)
}

// DialLateOffer calls target with an INVITE without SDP (RFC 3261 section
// 13.2.1): the offer comes in the 2xx and the phone answers in the ACK, or
// sends an ACK without SDP when answer is false.
func (p *Phone) DialLateOffer(ctx context.Context, target string, answer bool) *Call {
	return p.dial(ctx, target, &lateOffer{answer: answer})
}

// DialWith is Dial with extra headers on the INVITE.
func (p *Phone) DialWith(ctx context.Context, target string, headers ...sip.Header) *Call {
	return p.dial(ctx, target, nil, headers...)
}

func (p *Phone) dial(ctx context.Context, target string, late *lateOffer, headers ...sip.Header) *Call {
	ruri := sip.Uri{Scheme: "sip", User: target, Host: p.opts.Domain}
	req := p.newRequest(sip.INVITE, ruri)
	from := &sip.FromHeader{DisplayName: strings.ToUpper(p.opts.Username), Address: p.aor()}
	from.Params.Add("tag", sip.GenerateTagN(10))
	req.AppendHeader(from)
	req.AppendHeader(&sip.ToHeader{Address: ruri})
	req.AppendHeader(sip.HeaderClone(&p.contact))
	if late == nil {
		req.AppendHeader(sip.NewHeader("Content-Type", "application/sdp"))
	}
	for _, h := range headers {
		req.AppendHeader(h)
	}
	c := newCall(p, req)
	c.late = late
	media, err := p.newMedia(p.opts.Codecs[0])
	if err != nil {
		c.finish(0, err)
		return c
	}
	c.media = media
	if late == nil {
		req.SetBody(BuildSDPEvent(media.Port(), p.opts.Codecs, "sendrecv", p.te()))
	}
	go c.dial(ctx)
	return c
}
