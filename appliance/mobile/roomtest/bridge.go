package roomtest

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"
)

// Invite is an INVITE the bridge received from the PBX.
type Invite struct {
	Room    string
	Headers map[string]string // its X-* headers
	At      time.Time         // when it arrived (after any digest round)
	// First is when the first INVITE for the room arrived (before any
	// digest round).
	First time.Time
	// Challenged: it came after the bridge's 407 with valid credentials.
	Challenged bool
}

// Dial is the outcome of the INVITE a CreateSIPParticipant sent.
type Dial struct {
	Room, To string
	Status   int // final status from the PBX; 0 when none came
	Err      error
}

// Bridge is the double's SIP bridge.
type Bridge struct {
	Addr netip.AddrPort // where the PBX sends its mobile legs (UDP)

	srv    *Server
	opt    Options
	ua     *sipgo.UserAgent
	client *sipgo.Client
	dsc    *sipgo.DialogServerCache
	dcc    *sipgo.DialogClientCache
	conn   *net.UDPConn
	ctx    context.Context
	stop   context.CancelFunc
	dials  chan Dial

	mu      sync.Mutex
	pbx     netip.AddrPort
	invites []Invite
	first   map[string]time.Time // room: first INVITE's arrival
	rings   map[string]int       // room: 180s sent
	rooms   map[string]*room
	nonces  map[string]bool
}

// room is what the bridge knows of a room: published once the app is in.
type room struct {
	published, deleted chan struct{}
	hangups            []func()
}

func newBridge(s *Server, o Options) (*Bridge, error) {
	log := slog.New(slog.DiscardHandler)
	ua, err := sipgo.NewUA(sipgo.WithUserAgent("roomtest"), sipgo.WithUserAgentHostname(o.Host))
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(o.Host)})
	if err != nil {
		_ = ua.Close()
		return nil, err
	}
	addr := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	srv, err := sipgo.NewServer(ua, sipgo.WithServerLogger(log))
	if err != nil {
		return nil, err
	}
	client, err := sipgo.NewClient(ua, sipgo.WithClientHostname(o.Host), sipgo.WithClientPort(int(addr.Port())),
		sipgo.WithClientConnectionAddr(addr.String()), sipgo.WithClientLogger(log))
	if err != nil {
		return nil, err
	}
	contact := sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "bridge", Host: o.Host, Port: int(addr.Port())}}
	ctx, stop := context.WithCancel(context.Background())
	b := &Bridge{Addr: addr, srv: s, opt: o, ua: ua, client: client, conn: conn, ctx: ctx, stop: stop,
		dsc: sipgo.NewDialogServerCache(client, contact), dcc: sipgo.NewDialogClientCache(client, contact),
		dials: make(chan Dial, 16), rooms: map[string]*room{}, nonces: map[string]bool{},
		pbx: o.PBX, first: map[string]time.Time{}, rings: map[string]int{}}
	srv.OnInvite(b.onInvite)
	srv.OnAck(func(req *sip.Request, tx sip.ServerTransaction) { _ = b.dsc.ReadAck(req, tx) })
	srv.OnBye(func(req *sip.Request, tx sip.ServerTransaction) {
		if err := b.dsc.ReadBye(req, tx); err == nil {
			return
		}
		if err := b.dcc.ReadBye(req, tx); err != nil {
			_ = tx.Respond(sip.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil))
		}
	})
	go func() { _ = srv.ServeUDP(conn) }()
	// The client sends from the listening socket once sipgo knows it.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c := ua.TransportLayer().Pool("udp").Get(addr.String()); c != nil {
			c.Ref(-1)
			break
		}
		time.Sleep(time.Millisecond)
	}
	return b, nil
}

func (b *Bridge) close() {
	b.stop()
	_ = b.ua.Close()
	_ = b.conn.Close()
}

// roomOf returns the state of name, creating it.
func (b *Bridge) roomOf(name string) *room {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rooms[name]
	if r == nil {
		r = &room{published: make(chan struct{}), deleted: make(chan struct{})}
		b.rooms[name] = r
	}
	return r
}

// Publish is the app publishing in room: the bridge's held INVITEs for it
// answer 200.
func (b *Bridge) Publish(name string) {
	r := b.roomOf(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-r.published:
	default:
		close(r.published)
	}
}

// dropRoom ends every SIP participant of a deleted room: ringing INVITEs
// get 480, answered ones a BYE.
func (b *Bridge) dropRoom(name string) {
	r := b.roomOf(name)
	b.mu.Lock()
	select {
	case <-r.deleted:
	default:
		close(r.deleted)
	}
	hangups := r.hangups
	r.hangups = nil
	b.mu.Unlock()
	for _, h := range hangups {
		h()
	}
}

// Invites are the INVITEs received so far, in order.
func (b *Bridge) Invites() []Invite {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Invite(nil), b.invites...)
}

// WaitInvite waits up to d for an INVITE for room.
func (b *Bridge) WaitInvite(name string, d time.Duration) (Invite, bool) {
	deadline := time.Now().Add(d)
	for {
		for _, in := range b.Invites() {
			if in.Room == name {
				return in, true
			}
		}
		if time.Now().After(deadline) {
			return Invite{}, false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Dials delivers the outcome of each CreateSIPParticipant's INVITE.
func (b *Bridge) Dials() <-chan Dial { return b.dials }

func (b *Bridge) onInvite(req *sip.Request, tx sip.ServerTransaction) {
	if to := req.To(); to != nil && to.Params.Has("tag") {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 488, "Not Acceptable Here", nil))
		return
	}
	arrived := time.Now()
	b.mu.Lock()
	if _, ok := b.first[req.Recipient.User]; !ok {
		b.first[req.Recipient.User] = arrived
	}
	b.mu.Unlock()
	challenged := false
	if b.opt.Password != "" {
		if !b.authorised(req) {
			b.challenge(req, tx)
			return
		}
		challenged = true
	}
	name := req.Recipient.User
	hdrs := map[string]string{}
	for _, h := range req.Headers() {
		if strings.HasPrefix(strings.ToLower(h.Name()), "x-") {
			hdrs[h.Name()] = h.Value()
		}
	}
	b.mu.Lock()
	b.invites = append(b.invites, Invite{Room: name, Headers: hdrs, At: arrived, First: b.first[name], Challenged: challenged})
	b.mu.Unlock()
	ds, err := b.dsc.ReadInvite(req, tx)
	if err != nil {
		_ = tx.Respond(sip.NewResponseFromRequest(req, 400, "Bad Request", nil))
		return
	}
	defer ds.Close()
	b.hold(ds, name)
}

// ring sends a 180 for room.
func (b *Bridge) ring(ds *sipgo.DialogServerSession, name string) {
	_ = ds.Respond(180, "Ringing", nil)
	b.mu.Lock()
	b.rings[name]++
	b.mu.Unlock()
}

// Rings is the number of 180s sent for room.
func (b *Bridge) Rings(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rings[name]
}

// SetPBX sets where CreateSIPParticipant's INVITEs go (once the PBX's
// port is known).
func (b *Bridge) SetPBX(ap netip.AddrPort) {
	b.mu.Lock()
	b.pbx = ap
	b.mu.Unlock()
}

// hold rings every RingEvery until the room is published (200 with an SDP
// on a real socket), deleted (480) or the INVITE cancelled.
func (b *Bridge) hold(ds *sipgo.DialogServerSession, name string) {
	r := b.roomOf(name)
	b.ring(ds, name)
	tick := time.NewTicker(b.opt.RingEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			b.ring(ds, name)
			continue
		case <-ds.Context().Done():
			return
		case <-r.deleted:
			_ = ds.Respond(480, "Temporarily Unavailable", nil)
			return
		case <-b.ctx.Done():
			return
		case <-r.published:
		}
		break
	}
	m, err := newMedia(b.opt.Host)
	if err != nil {
		_ = ds.Respond(500, "Server Error", nil)
		return
	}
	defer m.close()
	b.mu.Lock()
	r.hangups = append(r.hangups, func() { _ = ds.Bye(context.Background()) })
	b.mu.Unlock()
	if err := ds.Respond(200, "OK", m.sdp(), sip.NewHeader("Content-Type", "application/sdp")); err != nil {
		return
	}
	b.stream(ds.Context(), m, ds.InviteRequest.Body())
}

// stream sends audio to the far end until the call or the bridge ends.
func (b *Bridge) stream(call context.Context, m *media, far []byte) {
	ctx, cancel := context.WithCancel(call)
	defer cancel()
	go func() {
		select {
		case <-b.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	m.send(ctx, far)
}

// authorised checks the Proxy-Authorization of req against a nonce the
// bridge issued.
func (b *Bridge) authorised(req *sip.Request) bool {
	h := req.GetHeader("Proxy-Authorization")
	if h == nil {
		return false
	}
	cred, err := digest.ParseCredentials(h.Value())
	if err != nil || cred.Username != b.opt.Username {
		return false
	}
	b.mu.Lock()
	ok := b.nonces[cred.Nonce]
	b.mu.Unlock()
	if !ok {
		return false
	}
	chal := &digest.Challenge{Realm: "roomtest", Nonce: cred.Nonce, Algorithm: "MD5", QOP: []string{"auth"}}
	want, err := digest.Digest(chal, digest.Options{Method: req.Method.String(), URI: cred.URI, Username: cred.Username,
		Password: b.opt.Password, Cnonce: cred.Cnonce, Count: cred.Nc})
	return err == nil && subtle.ConstantTimeCompare([]byte(want.Response), []byte(cred.Response)) == 1
}

func (b *Bridge) challenge(req *sip.Request, tx sip.ServerTransaction) {
	var n [16]byte
	_, _ = rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	b.mu.Lock()
	b.nonces[nonce] = true
	b.mu.Unlock()
	chal := &digest.Challenge{Realm: "roomtest", Nonce: nonce, Algorithm: "MD5", QOP: []string{"auth"}}
	res := sip.NewResponseFromRequest(req, 407, "Proxy Authentication Required", nil)
	res.AppendHeader(sip.NewHeader("Proxy-Authenticate", chal.String()))
	_ = tx.Respond(res)
}

// dial is the SIP participant CreateSIPParticipant asked for: an INVITE to
// the PBX for to, with headers, answered and held until the room is
// deleted or the PBX hangs up.
func (b *Bridge) dial(roomName, to string, headers map[string]string) {
	d := Dial{Room: roomName, To: to}
	if !b.call(roomName, to, headers, &d) {
		b.dials <- d
	}
}

// call places the INVITE of dial; once answered it reports d and holds
// the call (true), else it returns false with d filled in.
func (b *Bridge) call(roomName, to string, headers map[string]string, d *Dial) bool {
	m, err := newMedia(b.opt.Host)
	if err != nil {
		d.Err = err
		return false
	}
	defer m.close()
	var hs []sip.Header
	hs = append(hs, sip.NewHeader("Content-Type", "application/sdp"))
	for k, v := range headers {
		hs = append(hs, sip.NewHeader(k, v))
	}
	b.mu.Lock()
	pbx := b.pbx
	b.mu.Unlock()
	uri := sip.Uri{Scheme: "sip", User: to, Host: pbx.Addr().String(), Port: int(pbx.Port())}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	sess, err := b.dcc.Invite(ctx, uri, m.sdp(), hs...)
	if err != nil {
		d.Err = err
		return false
	}
	defer sess.Close()
	err = sess.WaitAnswer(ctx, sipgo.AnswerOptions{})
	if sess.InviteResponse != nil {
		d.Status = sess.InviteResponse.StatusCode
	}
	if err != nil {
		d.Err = err
		return false
	}
	if err := sess.Ack(ctx); err != nil {
		d.Err = err
		return false
	}
	r := b.roomOf(roomName)
	b.mu.Lock()
	r.hangups = append(r.hangups, func() { _ = sess.Bye(context.Background()) })
	b.mu.Unlock()
	b.dials <- *d
	b.stream(sess.Context(), m, sess.InviteResponse.Body())
	return true
}
