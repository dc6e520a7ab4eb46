package mobile

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"

	"pbx/appliance/config"
	"pbx/appliance/mobile/roomtest"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

const (
	testKey    = "APItest"
	testSecret = "test-secret-of-enough-length-for-hs256"
)

// TestBlocksOf: the effective block of the configuration corpus: a tenant
// with its own block gets it whole (no field from System), one with
// roomservice: null has none, one without the key has System's, and an
// unknown tenant System's.
func TestBlocksOf(t *testing.T) {
	root := filepath.Join("..", "config", "testdata", "good", "full")
	cfg, rep, err := config.Load(root, config.Options{Getenv: func(string) string { return "" }})
	if err != nil || !rep.OK() {
		t.Fatalf("load: %v %v", err, rep.Err())
	}
	blocks := BlocksOf(cfg)
	acme := blocks("acme")
	if acme == nil || acme.URL != "wss://rooms.acme.example" || acme.RoomPrefix != "acme-" || acme.Secret.Reveal() != "acme-inline-secret" {
		t.Fatalf("acme: %+v", acme)
	}
	if b := blocks("globex"); b != nil {
		t.Fatalf("globex switched it off, got %+v", b)
	}
	sys := blocks("no-such-tenant")
	if sys == nil || sys.URL != "https://rooms.example.com" || sys.Secret.Reveal() == "" {
		t.Fatalf("system block: %+v", sys)
	}
	ini := blocks("initech")
	if ini == nil || ini.URL != "https://rooms.initech.example" || ini.RoomPrefix != "" || ini.OutboundTrunkID != "" {
		t.Fatalf("initech replaces the whole block (no prefix or trunk from System): %+v", ini)
	}
}

// TestHTTPURL: ws and wss become http and https as the SDK does.
func TestHTTPURL(t *testing.T) {
	for in, want := range map[string]string{"ws://h:7880/": "http://h:7880", "wss://x.livekit.cloud": "https://x.livekit.cloud", "https://a": "https://a"} {
		if got := HTTPURL(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

func testBlock(rs *roomtest.Server) *config.RoomService {
	return &config.RoomService{URL: strings.Replace(rs.URL, "http", "ws", 1), APIKey: testKey, Secret: testSecret,
		SIPHost: rs.Bridge.Addr.Addr().String(), SIPPort: int(rs.Bridge.Addr.Port()), SIPTransport: "udp",
		RoomPrefix: "pbx-", OutboundTrunkID: "ST_out"}
}

// TestClientTokens: every request carries a token the double accepts
// (signature, key, grants, expiry); a wrong secret or key is refused, and
// a join token is room-scoped, names the device and lives 2 minutes.
func TestClientTokens(t *testing.T) {
	rs := roomtest.Start(t, roomtest.Options{Key: testKey, Secret: testSecret, OutboundTrunkID: "ST_out", PBX: netip.MustParseAddrPort("127.0.0.1:9")})
	b := testBlock(rs)
	c := NewClient(b, nil)
	ctx := context.Background()
	if err := c.CreateRoom(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRoom(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRoom(ctx, "r1"); err != nil {
		t.Fatalf("a room already gone: %v", err)
	}
	if r := rs.Refused(); len(r) != 0 {
		t.Fatalf("tokens refused: %v", r)
	}
	bad := *b
	bad.Secret = "another-secret-of-enough-length-xxxxx"
	if err := NewClient(&bad, nil).CreateRoom(ctx, "r2"); !errors.Is(err, ErrUnavailable) || rs.HasRoom("r2") {
		t.Fatalf("wrong secret: %v", err)
	}
	bad = *b
	bad.APIKey = "other"
	if err := NewClient(&bad, nil).CreateRoom(ctx, "r3"); err == nil || len(rs.Refused()) != 2 {
		t.Fatalf("wrong key: %v, refused %v", err, rs.Refused())
	}

	tok, err := c.JoinToken("room-a", DeviceIdentity("dev1"), JoinTokenTTL)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.ParseAPIToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	claims, grants, err := v.Verify(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if v.APIKey() != testKey || grants.Identity != "device-dev1" || grants.Video == nil || !grants.Video.RoomJoin || grants.Video.Room != "room-a" || grants.Video.RoomCreate || grants.Video.RoomAdmin || grants.SIP != nil {
		t.Fatalf("join grants %+v video %+v", grants, grants.Video)
	}
	if life := claims.ExpiresAt.Sub(claims.NotBefore.Time); life != JoinTokenTTL {
		t.Fatalf("join token lives %v", life)
	}
}

// hooks is an in-process Devices and Webhooks.
type hooks struct {
	mu   sync.Mutex
	devs []Device
	sent []sentHook
	fail bool
	slow map[string]chan struct{} // device id: Send blocks until closed
}

type sentHook struct {
	tenant, event string
	data          any
	at            time.Time
}

func (h *hooks) Devices(tenant, ext string) []Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Device
	for _, d := range h.devs {
		if d.Tenant == tenant && d.Extension == ext {
			out = append(out, d)
		}
	}
	return out
}

func (h *hooks) Send(tenant, event string, data any) error {
	if d, ok := data.(RingingData); ok && h.slow[d.Device.ID] != nil {
		<-h.slow[d.Device.ID]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail {
		return errors.New("no webhook")
	}
	h.sent = append(h.sent, sentHook{tenant, event, data, time.Now()})
	return nil
}

func (h *hooks) events() []sentHook {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sentHook(nil), h.sent...)
}

func (h *hooks) wait(t *testing.T, event string, n int) []sentHook {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out []sentHook
		for _, s := range h.events() {
			if s.event == event {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s webhooks, want %d", len(out), event, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestService(t *testing.T, rs *roomtest.Server, h *hooks) *Service {
	b := testBlock(rs)
	return New(Options{Blocks: func(tn string) *config.RoomService {
		if tn == "demo" {
			return b
		}
		return nil
	}, Devices: h, Webhooks: h, DeleteDelay: 200 * time.Millisecond}, nil)
}

// TestOfferLegsAndOutcomes: an extension with two devices gets a room
// named <prefix><call id>, one mobile.ringing per device (with a join
// token for the room) and one leg per device toward the bridge; another
// leg answering ends the offer as answered_elsewhere and deletes the room
// after the delay, not before. An extension without devices gets nothing.
func TestOfferLegsAndOutcomes(t *testing.T) {
	rs := roomtest.Start(t, roomtest.Options{Key: testKey, Secret: testSecret, OutboundTrunkID: "ST_out", PBX: netip.MustParseAddrPort("127.0.0.1:9")})
	h := &hooks{devs: []Device{
		{ID: "d1", Platform: "ios", Push: json.RawMessage(`{"apns":"x"}`), Tenant: "demo", Extension: "101"},
		{ID: "d2", Platform: "android", Tenant: "demo", Extension: "101"},
	}}
	s := newTestService(t, rs, h)
	id := b2bua.NewCallID(time.Now())
	legs := s.Offer(context.Background(), OfferRequest{Call: id, Tenant: "demo", Extension: "101", CallerNumber: "100", CallerName: "Alice"})
	if len(legs) != 2 {
		t.Fatalf("legs %+v", legs)
	}
	room := "pbx-" + string(id)
	if !rs.HasRoom(room) {
		t.Fatalf("room %s not created", room)
	}
	l := legs[0]
	if l.Kind != b2bua.KindMobile || l.URI.User != room || l.URI.Port != int(rs.Bridge.Addr.Port()) || l.Extension != "101" || l.Auth != nil {
		t.Fatalf("leg %+v", l)
	}
	ring := h.wait(t, EventRinging, 2)
	d, _ := ring[0].data.(RingingData)
	if d.Room != room || d.CallID != string(id) || d.Caller.Name != "Alice" || d.Extension != "101" || d.Token == "" || !strings.HasPrefix(d.URL, "ws://") {
		t.Fatalf("ringing data %+v", d)
	}
	if none := s.Offer(context.Background(), OfferRequest{Call: b2bua.NewCallID(time.Now()), Tenant: "demo", Extension: "102"}); none != nil {
		t.Fatalf("no devices, legs %+v", none)
	}

	ended := time.Now()
	s.CallEvent(b2bua.Event{Kind: b2bua.EventAnswered, Call: b2bua.CallInfo{ID: id}, Leg: &b2bua.LegInfo{Kind: b2bua.KindEndpoint}})
	s.CallEvent(b2bua.Event{Kind: b2bua.EventLegEnded, Call: b2bua.CallInfo{ID: id}, Leg: &b2bua.LegInfo{Kind: b2bua.KindMobile, Cause: calls.CauseCancelled}})
	e := h.wait(t, EventEnded, 1)
	if ed, _ := e[0].data.(EndedData); ed.Outcome != OutcomeAnsweredElsewhere || ed.Room != room || ed.Extension != "101" {
		t.Fatalf("ended %+v", e[0].data)
	}
	del, ok := rs.WaitCall("DeleteRoom", room, 5*time.Second)
	if !ok || del.At.Sub(ended) < 200*time.Millisecond {
		t.Fatalf("room deleted %v after the answer elsewhere (found %v), want the delay", del.At.Sub(ended), ok)
	}
	s.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: id, Cause: calls.CauseAnswered}})
	if n := len(h.wait(t, EventEnded, 1)); n != 1 || s.Pending() != 0 {
		t.Fatalf("%d ended webhooks, %d offers pending", n, s.Pending())
	}
}

// TestOfferOutcomes: the outcome of every way an offer ends.
func TestOfferOutcomes(t *testing.T) {
	mob := func(cause calls.Cause) *b2bua.LegInfo { return &b2bua.LegInfo{Kind: b2bua.KindMobile, Cause: cause} }
	cases := []struct {
		name string
		evs  []b2bua.Event
		want string
	}{
		{"caller cancelled", []b2bua.Event{{Kind: b2bua.EventLegEnded, Leg: mob(calls.CauseCancelled)}, {Kind: b2bua.EventEnded, Call: b2bua.CallInfo{Cause: calls.CauseCancelled}}}, OutcomeCallerCancelled},
		{"no answer", []b2bua.Event{{Kind: b2bua.EventLegEnded, Leg: mob(calls.CauseNoAnswer)}}, OutcomeNoAnswer},
		{"bridge refused", []b2bua.Event{{Kind: b2bua.EventLegEnded, Leg: mob(calls.CauseRejected)}}, OutcomeFailed},
		{"ring timeout", []b2bua.Event{{Kind: b2bua.EventLegEnded, Leg: mob(calls.CauseCancelled)}, {Kind: b2bua.EventEnded, Call: b2bua.CallInfo{Cause: calls.CauseNoAnswer}}}, OutcomeNoAnswer},
		{"mobile won", []b2bua.Event{{Kind: b2bua.EventAnswered, Leg: mob("")}, {Kind: b2bua.EventEnded, Call: b2bua.CallInfo{Cause: calls.CauseAnswered}}}, ""},
	}
	for _, c := range cases {
		o := &offer{legs: 1}
		var got []string
		for _, ev := range c.evs {
			if out := o.step(ev); out != "" {
				got = append(got, out)
			}
		}
		want := []string{c.want}
		if c.want == "" {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: outcomes %v, want %v", c.name, got, want)
		}
	}
}

// TestPlaceAndRoomToken: Place creates the room, asks the SIP service to
// dial the number on the outbound trunk with a live grant in X-Pbx-Token,
// and answers the app's join data; the grant authorises exactly one
// INVITE for that number. RoomToken serves the room to the extension that
// placed it and to no other (ErrRoomNotFound).
func TestPlaceAndRoomToken(t *testing.T) {
	rs := roomtest.Start(t, roomtest.Options{Key: testKey, Secret: testSecret, OutboundTrunkID: "ST_out", PBX: netip.MustParseAddrPort("127.0.0.1:9")})
	s := newTestService(t, rs, &hooks{})
	ss := Session{Device: Device{Tenant: "demo", Account: "alice", Extension: "100", ID: "d1"}}
	call, err := s.Place(context.Background(), ss, "102")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(call.Room, "pbx-") || call.To != "102" || call.Token == "" || time.Until(call.ExpiresAt) > JoinTokenTTL {
		t.Fatalf("call %+v", call)
	}
	c, ok := rs.WaitCall("CreateSIPParticipant", call.Room, time.Second)
	if !ok || c.Trunk != "ST_out" || c.To != "102" || c.Headers[HeaderGrant] == "" {
		t.Fatalf("sip participant %+v", c)
	}
	if _, err := s.Authorise(c.Headers[HeaderGrant], "103"); !errors.Is(err, ErrGrant) {
		t.Fatalf("grant used for another number: %v", err)
	}
	if _, err := s.Place(context.Background(), ss, "1@2"); !errors.Is(err, ErrBadDestination) {
		t.Fatalf("bad number: %v", err)
	}
	if _, err := s.Place(context.Background(), Session{Device: Device{Tenant: "other"}}, "102"); !errors.Is(err, ErrNoRoomService) {
		t.Fatalf("tenant without room service: %v", err)
	}
	call2, _ := s.Place(context.Background(), ss, "102")
	c2, _ := rs.WaitCall("CreateSIPParticipant", call2.Room, time.Second)
	g, err := s.Authorise(c2.Headers[HeaderGrant], "102")
	if err != nil || g.Account != "alice" || g.DeviceID != "d1" || g.Room != call2.Room {
		t.Fatalf("grant %+v %v", g, err)
	}

	jt, err := s.RoomToken(context.Background(), Session{Device: Device{Tenant: "demo", Extension: "100", ID: "d9"}}, call.Room)
	if err != nil || jt.Token == "" {
		t.Fatalf("room token: %+v %v", jt, err)
	}
	for _, other := range []Session{{Device: Device{Tenant: "demo", Extension: "101"}}, {Device: Device{Tenant: "x", Extension: "100"}}} {
		if _, err := s.RoomToken(context.Background(), other, call.Room); !errors.Is(err, ErrRoomNotFound) {
			t.Fatalf("%+v: %v, want ErrRoomNotFound", other, err)
		}
	}
	if _, err := s.RoomToken(context.Background(), ss, "pbx-unknown"); !errors.Is(err, ErrRoomNotFound) {
		t.Fatalf("unknown room: %v", err)
	}
}

// TestOfferSlowWebhook: a device whose mobile.ringing is not on the wire
// within RingWait gets no leg (its INVITE would overtake the webhook); a
// failed delivery gets none either; the others ring.
func TestOfferSlowWebhook(t *testing.T) {
	rs := roomtest.Start(t, roomtest.Options{Key: testKey, Secret: testSecret, OutboundTrunkID: "ST_out", PBX: netip.MustParseAddrPort("127.0.0.1:9")})
	release := make(chan struct{})
	defer close(release)
	h := &hooks{devs: []Device{{ID: "fast", Tenant: "demo", Extension: "101"}, {ID: "slow", Tenant: "demo", Extension: "101"}},
		slow: map[string]chan struct{}{"slow": release}}
	b := testBlock(rs)
	s := New(Options{Blocks: func(string) *config.RoomService { return b }, Devices: h, Webhooks: h, RingWait: 100 * time.Millisecond}, nil)
	start := time.Now()
	legs := s.Offer(context.Background(), OfferRequest{Call: b2bua.NewCallID(time.Now()), Tenant: "demo", Extension: "101"})
	if len(legs) != 1 || legs[0].Name != "mobile:fast" {
		t.Fatalf("legs %+v, want the fast device's only", legs)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("offer took %v", d)
	}
	h.mu.Lock()
	h.fail = true
	h.mu.Unlock()
	id := b2bua.NewCallID(time.Now())
	if legs := s.Offer(context.Background(), OfferRequest{Call: id, Tenant: "demo", Extension: "102"}); legs != nil {
		t.Fatalf("no device: %+v", legs)
	}
	h.devs = h.devs[:1]
	if legs := s.Offer(context.Background(), OfferRequest{Call: id, Tenant: "demo", Extension: "101"}); legs != nil {
		t.Fatalf("webhook failed, legs %+v", legs)
	}
	if _, ok := rs.WaitCall("DeleteRoom", "pbx-"+string(id), 5*time.Second); !ok || s.Pending() != 1 {
		t.Fatalf("the room of an offer without legs must be deleted at once (found %v), pending %d", ok, s.Pending())
	}
}
