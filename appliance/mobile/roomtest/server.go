// Package roomtest is a LiveKit-compatible room service for tests: an
// HTTP server serving LiveKit's own generated Twirp RoomService and SIP
// servers, which checks every access token it receives (signature with the
// secret, API key, grants, expiry) and records every call, and a SIP bridge
// on sipgo that behaves as LiveKit's: it challenges the PBX's INVITEs with
// digest when given credentials, keeps their X-* headers, sends 180 every
// RingEvery, holds its 200 until the test calls Publish(room), and answers
// CreateSIPParticipant by sending an INVITE to the PBX (with the request's
// headers, such as X-Pbx-Token). Its SDP names a real UDP socket.
package roomtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	"github.com/twitchtv/twirp"
)

// Options configure the double.
type Options struct {
	Key, Secret string
	// OutboundTrunkID is the only outbound trunk CreateSIPParticipant
	// accepts; PBX is where that trunk's INVITEs go.
	OutboundTrunkID string
	PBX             netip.AddrPort
	// Username and Password, when set, make the bridge challenge every
	// INVITE it receives with 407 and check the answer.
	Username, Password string
	// RingEvery is the interval of the bridge's 180s; 0 means 1 s.
	RingEvery time.Duration
	// Host is the loopback address to listen on; empty means 127.0.0.1.
	Host string
}

// Call is one Twirp request the double served.
type Call struct {
	Method  string // "CreateRoom", "DeleteRoom", "CreateSIPParticipant"
	Room    string
	To      string            // CreateSIPParticipant's sip_call_to
	Trunk   string            // CreateSIPParticipant's sip_trunk_id
	Headers map[string]string // CreateSIPParticipant's headers
	At      time.Time
}

// Server is the running double.
type Server struct {
	URL string // http://host:port, the roomservice url
	opt Options
	hs  *http.Server
	*Bridge

	mu      sync.Mutex
	calls   []Call
	refused []string // why tokens were refused
	rooms   map[string]bool
}

type grantsKey struct{}

// Start runs the double until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.RingEvery <= 0 {
		o.RingEvery = time.Second
	}
	s := &Server{opt: o, rooms: map[string]bool{}}
	b, err := newBridge(s, o)
	if err != nil {
		t.Fatalf("roomtest bridge: %v", err)
	}
	s.Bridge = b
	t.Cleanup(b.close)
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, "0"))
	if err != nil {
		t.Fatalf("roomtest listen: %v", err)
	}
	rs := livekit.NewRoomServiceServer(&roomService{s: s})
	ss := livekit.NewSIPServer(&sipService{s: s})
	mux := http.NewServeMux()
	mux.Handle(rs.PathPrefix(), s.authenticate(rs))
	mux.Handle(ss.PathPrefix(), s.authenticate(ss))
	s.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.hs.Serve(ln) }()
	t.Cleanup(func() { _ = s.hs.Close() })
	s.URL = "http://" + ln.Addr().String()
	return s
}

// authenticate checks the bearer token as LiveKit does: it must parse, name
// the API key and verify with the secret (which checks its expiry);
// otherwise 401 with a plain text body.
func (s *Server) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var grants *auth.ClaimGrants
		err := errors.New("no bearer token")
		if ok {
			var v *auth.APIKeyTokenVerifier
			if v, err = auth.ParseAPIToken(raw); err == nil {
				if v.APIKey() != s.opt.Key {
					err = fmt.Errorf("invalid API key %q", v.APIKey())
				} else {
					_, grants, err = v.Verify(s.opt.Secret)
				}
			}
		}
		if err != nil {
			s.refuse(r.URL.Path + ": " + err.Error())
			http.Error(w, "invalid authorization token: "+err.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), grantsKey{}, grants)))
	})
}

func (s *Server) refuse(why string) {
	s.mu.Lock()
	s.refused = append(s.refused, why)
	s.mu.Unlock()
}

// need checks the request's grants with ok; a lacking token is refused as
// LiveKit does (unauthenticated, "permissions denied") and remembered.
func (s *Server) need(ctx context.Context, method string, ok func(g *auth.ClaimGrants) bool) error {
	g, _ := ctx.Value(grantsKey{}).(*auth.ClaimGrants)
	if g == nil || !ok(g) {
		s.refuse(method + ": permissions denied")
		return twirp.NewError(twirp.Unauthenticated, "permissions denied")
	}
	return nil
}

func (s *Server) record(c Call) {
	c.At = time.Now()
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// Calls are the Twirp requests served so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Refused are the reasons of every token refused so far.
func (s *Server) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refused...)
}

// HasRoom reports whether room exists (created and not deleted).
func (s *Server) HasRoom(room string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rooms[room]
}

// WaitCall waits up to d for a served request of method on room and
// returns it.
func (s *Server) WaitCall(method, room string, d time.Duration) (Call, bool) {
	deadline := time.Now().Add(d)
	for {
		for _, c := range s.Calls() {
			if c.Method == method && c.Room == room {
				return c, true
			}
		}
		if time.Now().After(deadline) {
			return Call{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// roomService is the RoomService the double serves; methods it does not
// serve panic (the embedded interface is nil), which Twirp answers 500.
type roomService struct {
	livekit.RoomService
	s *Server
}

func (r *roomService) CreateRoom(ctx context.Context, req *livekit.CreateRoomRequest) (*livekit.Room, error) {
	if err := r.s.need(ctx, "CreateRoom", func(g *auth.ClaimGrants) bool { return g.Video != nil && g.Video.RoomCreate }); err != nil {
		return nil, err
	}
	r.s.record(Call{Method: "CreateRoom", Room: req.Name})
	r.s.mu.Lock()
	r.s.rooms[req.Name] = true
	r.s.mu.Unlock()
	return &livekit.Room{Sid: "RM_" + req.Name, Name: req.Name, CreationTime: time.Now().Unix()}, nil
}

func (r *roomService) DeleteRoom(ctx context.Context, req *livekit.DeleteRoomRequest) (*livekit.DeleteRoomResponse, error) {
	if err := r.s.need(ctx, "DeleteRoom", func(g *auth.ClaimGrants) bool { return g.Video != nil && g.Video.RoomCreate }); err != nil {
		return nil, err
	}
	r.s.record(Call{Method: "DeleteRoom", Room: req.Room})
	r.s.mu.Lock()
	ok := r.s.rooms[req.Room]
	delete(r.s.rooms, req.Room)
	r.s.mu.Unlock()
	if !ok {
		return nil, twirp.NotFoundError("requested room does not exist")
	}
	r.s.Bridge.dropRoom(req.Room)
	return &livekit.DeleteRoomResponse{}, nil
}

// sipService is the SIP service the double serves: CreateSIPParticipant
// only.
type sipService struct {
	livekit.SIP
	s *Server
}

func (x *sipService) CreateSIPParticipant(ctx context.Context, req *livekit.CreateSIPParticipantRequest) (*livekit.SIPParticipantInfo, error) {
	if err := x.s.need(ctx, "CreateSIPParticipant", func(g *auth.ClaimGrants) bool { return g.SIP != nil && g.SIP.Call }); err != nil {
		return nil, err
	}
	x.s.record(Call{Method: "CreateSIPParticipant", Room: req.RoomName, To: req.SipCallTo, Trunk: req.SipTrunkId, Headers: req.Headers})
	if req.SipTrunkId != x.s.opt.OutboundTrunkID {
		return nil, twirp.NotFoundError("requested sip trunk does not exist")
	}
	if req.SipCallTo == "" || strings.Contains(req.SipCallTo, "@") || req.RoomName == "" {
		return nil, twirp.InvalidArgumentError("sip_call_to", "missing or invalid")
	}
	go x.s.Bridge.dial(req.RoomName, req.SipCallTo, req.Headers)
	return &livekit.SIPParticipantInfo{ParticipantId: "PA_" + req.SipCallTo, ParticipantIdentity: req.ParticipantIdentity, RoomName: req.RoomName, SipCallId: "SCL_" + req.RoomName}, nil
}
