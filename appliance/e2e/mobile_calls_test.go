package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"

	"pbx/appliance/mobile"
	"pbx/appliance/mobile/roomtest"
	"pbx/sipcore/siptest"
)

const (
	rsKey      = "APIe2emobile"
	rsSecret   = "e2e-mobile-room-service-secret-0123456789"
	hookSecret = "e2e-mobile-hook-secret"
)

// signedHook is one webhook the tenant's backend received, its signature
// checked.
type signedHook struct {
	ID, Event, Tenant string
	Data              json.RawMessage
	At                time.Time // when its request reached the handler
}

// signedHooks is the tenant's backend: it verifies every request as
// DESIGN.md 5.3 signs it (X-Pbx-Signature: v1=hex HMAC-SHA256(secret,
// timestamp "." body), the event and delivery headers matching the body,
// a fresh timestamp) and records the arrival of each.
type signedHooks struct {
	mu   sync.Mutex
	hits []signedHook
	bad  []string
}

// stampConn reads with the kernel's receive timestamps (SO_TIMESTAMPNS)
// and keeps the first: when the one request it carries (the receiver
// closes each connection after one) reached this host, free of the
// receiver's scheduling, to compare with the bridge's INVITE.
type stampConn struct {
	*net.TCPConn
	once  sync.Once
	first time.Time
	got   chan struct{}
}

func (c *stampConn) Read(p []byte) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n, oobn int
	var rerr error
	oob := make([]byte, 128)
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), p, oob, 0)
		return rerr != syscall.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	c.once.Do(func() {
		c.first = time.Now() // later than the arrival: never flatters the order
		msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if at, ok := recvStamp(m); ok {
				c.first = at
			}
		}
		close(c.got)
	})
	return n, nil
}

type stampListener struct{ *net.TCPListener }

func (l stampListener) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	return &stampConn{TCPConn: c, got: make(chan struct{})}, nil
}

type connKey struct{}

// serveSignedHooks runs the receiver on loopback, one request per
// connection, each stamped with its arrival at the kernel (accepted
// sockets inherit SO_TIMESTAMPNS from the listener).
func serveSignedHooks(t testing.TB, h *signedHooks) string {
	s := httptest.NewUnstartedServer(h)
	ln := s.Listener.(*net.TCPListener)
	rc, err := ln.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			err = enableRecvStamps(int(fd))
		})
	}
	if err != nil {
		t.Fatalf("SO_TIMESTAMPNS: %v", err)
	}
	s.Listener = stampListener{ln}
	s.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

func (h *signedHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	if c, ok := r.Context().Value(connKey{}).(*stampConn); ok {
		<-c.got
		at = c.first
	}
	w.Header().Set("Connection", "close")
	body, _ := io.ReadAll(r.Body)
	ts := r.Header.Get("X-Pbx-Timestamp")
	m := hmac.New(sha256.New, []byte(hookSecret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	want := "v1=" + hex.EncodeToString(m.Sum(nil))
	var p struct {
		ID        string          `json:"id"`
		Event     string          `json:"event"`
		CreatedAt time.Time       `json:"created_at"`
		Tenant    string          `json:"tenant"`
		Data      json.RawMessage `json:"data"`
	}
	err := json.Unmarshal(body, &p)
	sec, _ := strconv.ParseInt(ts, 10, 64)
	var why string
	switch {
	case !hmac.Equal([]byte(r.Header.Get("X-Pbx-Signature")), []byte(want)):
		why = "bad signature"
	case err != nil:
		why = "body: " + err.Error()
	case r.Header.Get("X-Pbx-Event") != p.Event || r.Header.Get("X-Pbx-Delivery") != p.ID || p.ID == "":
		why = "headers do not match the body"
	case time.Since(time.Unix(sec, 0)).Abs() > time.Minute || time.Since(p.CreatedAt).Abs() > time.Minute:
		why = "stale timestamp " + ts
	case r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		why = "not a JSON POST"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if why != "" {
		h.bad = append(h.bad, why+": "+string(body))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.hits = append(h.hits, signedHook{ID: p.ID, Event: p.Event, Tenant: p.Tenant, Data: p.Data, At: at})
}

// wait returns the first n webhooks of event, failing after d.
func (h *signedHooks) wait(t testing.TB, event string, n int, d time.Duration) []signedHook {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var out []signedHook
		h.mu.Lock()
		bad := append([]string(nil), h.bad...)
		for _, x := range h.hits {
			if x.Event == event {
				out = append(out, x)
			}
		}
		h.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("webhooks refused by the backend: %v", bad)
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s webhooks after %v, want %d", len(out), event, d, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// count is the number of webhooks of event received.
func (h *signedHooks) count(event string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, x := range h.hits {
		if x.Event == event {
			n++
		}
	}
	return n
}

// mobileRig is bin/pbx with a room service (the roomtest double, in this
// process) and a webhook receiver for tenant demo.
type mobileRig struct {
	p     *pbxProc
	rs    *roomtest.Server
	hooks *signedHooks
	wsURL string
	api   apiClient
}

func startMobileRig(t *testing.T) *mobileRig {
	m := newMobileRig(t)
	m.api = apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", m.p.apiPort), token: testToken}
	return m
}

// newMobileRig starts the rig; its api is left unset.
func newMobileRig(t testing.TB) *mobileRig {
	rs := roomtest.Start(t, roomtest.Options{Key: rsKey, Secret: rsSecret, OutboundTrunkID: "ST_pbx",
		Username: "bridge", Password: "bridge-pw"}) // 180 every second, as LiveKit's bridge
	hooks := &signedHooks{}
	hooksURL := serveSignedHooks(t, hooks)
	ws := strings.Replace(rs.URL, "http://", "ws://", 1)
	sipPort := freePort(t)
	c := pbxConfig{
		SIPPort: sipPort,
		APIPort: freePort(t),
		APIRate: 6000,
		// Raw YAML under spec, as the voicemail tests pass their block.
		Recording: fmt.Sprintf(`  roomservice:
    url: %s
    apiKey: %s
    apiSecret: %s
    sipHost: 127.0.0.1
    sipPort: %d
    sipTransport: udp
    auth: {username: bridge, password: bridge-pw}
    roomPrefix: pbx-
    outboundTrunkId: ST_pbx
`, ws, rsKey, rsSecret, rs.Bridge.Addr.Port()),
		Tokens: "      - name: mobile-ops\n        token: " + mobileOperator + "\n        scopes: [mobile:read, mobile:manage]\n",
		Extra: fmt.Sprintf(`---
configVersion: pbx/v1
kind: Webhook
metadata: {name: app-backend, tenant: demo}
spec:
  url: %s/hooks
  events: [mobile.ringing, mobile.ended]
  secret: %s
`, hooksURL, hookSecret),
	}
	p := startPBX(t, c)
	rs.Bridge.SetPBX(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(sipPort)))
	return &mobileRig{p: p, rs: rs, hooks: hooks, wsURL: ws}
}

// checkJoinToken verifies a join token as the room service would and
// checks it admits identity to room only.
func checkJoinToken(t *testing.T, tok, room, identity string) {
	t.Helper()
	v, err := auth.ParseAPIToken(tok)
	if err != nil {
		t.Fatalf("join token: %v", err)
	}
	_, g, err := v.Verify(rsSecret)
	if err != nil || v.APIKey() != rsKey {
		t.Fatalf("join token of key %q: %v", v.APIKey(), err)
	}
	if g.Identity != identity || g.Video == nil || !g.Video.RoomJoin || g.Video.Room != room || g.Video.RoomCreate {
		t.Fatalf("join token grants %+v video %+v: want %s in %s only", g, g.Video, identity, room)
	}
}

// sippSaw waits until SIPp's message log shows substr.
func sippSaw(t *testing.T, dir string, r *sippRun, substr string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, r.name+".messages.log"))
		if strings.Contains(string(b), substr) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not see %q within %v:\n%s", r.name, substr, d, r.errors(dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cdrRecord waits for the finished call record id through the API.
func (m *mobileRig) cdrRecord(t *testing.T, id string) (rec struct {
	AnsweredBy string `json:"answered_by"`
	Legs       []struct {
		Target, Kind, Cause string
		Won                 bool
	} `json:"legs"`
}) {
	t.Helper()
	waitFor(t, "the call record "+id, 10*time.Second, func() bool {
		code, b := m.api.do("GET", "/v1/cdr/demo/"+id)
		return code == 200 && json.Unmarshal(b, &rec) == nil
	})
	return rec
}

// deskAndCaller registers bob's desk phone (a SIPp UAS running scenario
// uas) and has alice (SIPp) call 101, hanging up holdMS after the answer.
func (m *mobileRig) deskAndCaller(t *testing.T, uas string, holdMS int) (dir string, desk, caller *sippRun) {
	dir = scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, m.p, dir, "udp", "bob", bobPort)
	desk = startSIPp(t, dir, "desk", 30*time.Second, fmt.Sprintf("127.0.0.1:%d", m.p.sipPort), "-sf", uas, "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	caller = startSIPp(t, dir, "caller", 30*time.Second, fmt.Sprintf("127.0.0.1:%d", m.p.sipPort), "-sf", "uac_call.xml",
		"-inf", "alice.csv", "-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", m.p.sipPort),
		"-m", "1", "-d", strconv.Itoa(holdMS), "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	return dir, desk, caller
}

// TestMobileAppAnswersFirst: bob's app logs in; alice (SIPp) calls 101.
// The signed mobile.ringing reaches the backend before the bridge's
// INVITE, which answers the bridge's 407 and names the device; the desk
// phone (SIPp) and the mobile leg ring, the bridge's 180 every second
// notwithstanding. The app publishes: the call is answered through the
// mobile leg, the desk phone is cancelled, and the call record (API) names
// the mobile leg the winner.
func TestMobileAppAnswersFirst(t *testing.T) {
	m := startMobileRig(t)
	bob := deviceLogin(t, m.p, "bob", "bob-secret", "bob-phone")
	alice := deviceLogin(t, m.p, "alice", "alice-secret", "alice-phone")
	dir, desk, caller := m.deskAndCaller(t, "uas_ring_cancel.xml", 1000)

	ring := m.hooks.wait(t, mobile.EventRinging, 1, 10*time.Second)[0]
	var data struct {
		mobile.RingingData
		Device struct {
			ID, Platform string
			Push         json.RawMessage
		} `json:"device"`
	}
	if err := json.Unmarshal(ring.Data, &data); err != nil {
		t.Fatal(err)
	}
	if ring.Tenant != "demo" || data.CallID == "" || data.Room != "pbx-"+data.CallID || data.URL != m.wsURL ||
		data.Extension != "101" || data.Caller.Number != "100" || data.Caller.Name != "Alice" ||
		data.Device.ID != "bob-phone" || data.Device.Platform != "ios" || string(data.Device.Push) != `{"apns":"x"}` ||
		data.ExpiresAt.Sub(ring.At) < 100*time.Second || data.ExpiresAt.Sub(ring.At) > 2*time.Minute+5*time.Second {
		t.Fatalf("mobile.ringing %s", ring.Data)
	}
	checkJoinToken(t, data.Token, data.Room, "device-bob-phone")
	inv, ok := m.rs.Bridge.WaitInvite(data.Room, 10*time.Second)
	if !ok {
		t.Fatalf("no INVITE for room %s at the bridge", data.Room)
	}
	if !ring.At.Before(inv.First) {
		t.Fatalf("mobile.ringing at %v, the bridge's first INVITE at %v: the webhook must come first", ring.At, inv.First)
	}
	if !inv.Challenged || inv.Headers[mobile.HeaderDevice] != "bob-phone" {
		t.Fatalf("bridge INVITE %+v: want it authenticated after 407 and naming the device", inv)
	}
	if !m.rs.HasRoom(data.Room) {
		t.Fatalf("room %s not created", data.Room)
	}
	// The app may fetch a fresh join token for the room; another
	// extension's app learns nothing of it (404, never 403).
	code, rt := deviceCall(t, m.p, "POST", "/v1/mobile/roomservice/token", bob, fmt.Sprintf(`{"room":%q}`, data.Room))
	if tok, _ := rt["token"].(string); code != 200 || rt["url"] != m.wsURL || tok == "" {
		t.Fatalf("bob's room token: %d %v", code, rt)
	} else {
		checkJoinToken(t, tok, data.Room, "device-bob-phone")
	}
	if code, rt := deviceCall(t, m.p, "POST", "/v1/mobile/roomservice/token", alice, fmt.Sprintf(`{"room":%q}`, data.Room)); code != 404 {
		t.Fatalf("alice's token for bob's room: %d %v, want 404", code, rt)
	}
	sippSaw(t, dir, desk, "INVITE sip:", 10*time.Second)
	waitFor(t, "three 180s from the bridge", 10*time.Second, func() bool { return m.rs.Bridge.Rings(data.Room) >= 3 })
	if isDone(caller) {
		t.Fatalf("the caller gave up while both rang:\n%s", caller.errors(dir))
	}
	m.rs.Bridge.Publish(data.Room)
	if code := caller.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, caller.errors(dir))
	}
	if code := desk.wait(); code != 0 {
		t.Fatalf("desk phone (expects CANCEL): sipp exit %d\n%s", code, desk.errors(dir))
	}
	rec := m.cdrRecord(t, data.CallID)
	var won, desks []string
	for _, l := range rec.Legs {
		if l.Won {
			won = append(won, l.Kind+" "+l.Target)
		}
		if l.Kind != "mobile" {
			desks = append(desks, l.Cause)
		}
	}
	if len(won) != 1 || won[0] != "mobile mobile:bob-phone" || rec.AnsweredBy != "101" || len(desks) != 1 || desks[0] != "cancelled" {
		t.Fatalf("record legs %+v answered by %q: want the mobile leg the winner, the desk phone cancelled", rec.Legs, rec.AnsweredBy)
	}
	if n := m.hooks.count(mobile.EventEnded); n != 0 {
		t.Fatalf("%d mobile.ended for an offer the app won", n)
	}
}

func isDone(r *sippRun) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// TestMobileDeskPhoneWins: the desk phone answers first: the mobile leg is
// cancelled, the signed mobile.ended says answered_elsewhere, and the
// room is deleted about 5 seconds after it.
func TestMobileDeskPhoneWins(t *testing.T) {
	m := startMobileRig(t)
	deviceLogin(t, m.p, "bob", "bob-secret", "bob-phone")
	dir, desk, caller := m.deskAndCaller(t, "uas_answer.xml", 1000)
	ring := m.hooks.wait(t, mobile.EventRinging, 1, 10*time.Second)[0]
	var rd mobile.RingingData
	if err := json.Unmarshal(ring.Data, &rd); err != nil {
		t.Fatal(err)
	}
	end := m.hooks.wait(t, mobile.EventEnded, 1, 10*time.Second)[0]
	var data mobile.EndedData
	if err := json.Unmarshal(end.Data, &data); err != nil {
		t.Fatal(err)
	}
	if end.Tenant != "demo" || data.Outcome != mobile.OutcomeAnsweredElsewhere || data.Extension != "101" ||
		data.CallID != rd.CallID || data.Room != rd.Room {
		t.Fatalf("mobile.ended %s, want answered_elsewhere for %s", end.Data, rd.Room)
	}
	if !m.rs.HasRoom(data.Room) {
		t.Fatal("room deleted at once, want it kept 5 s")
	}
	waitFor(t, "the room's deletion", 10*time.Second, func() bool { return !m.rs.HasRoom(data.Room) })
	del, _ := m.rs.WaitCall("DeleteRoom", data.Room, time.Second)
	if d := del.At.Sub(end.At); d < mobile.DeleteDelay-500*time.Millisecond || d > mobile.DeleteDelay+2*time.Second {
		t.Fatalf("room deleted %v after mobile.ended, want about %v", d, mobile.DeleteDelay)
	}
	if code := caller.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s", code, caller.errors(dir))
	}
	if code := desk.wait(); code != 0 {
		t.Fatalf("desk phone: sipp exit %d\n%s", code, desk.errors(dir))
	}
	rec := m.cdrRecord(t, data.CallID)
	for _, l := range rec.Legs {
		if (l.Kind == "mobile") == l.Won {
			t.Fatalf("record legs %+v: want the desk phone the winner", rec.Legs)
		}
		if l.Kind == "mobile" && l.Cause != "cancelled" {
			t.Fatalf("mobile leg %+v, want cancelled", l)
		}
	}
}

// placeCall is POST /v1/mobile/calls {to} with the device token.
func placeCall(t *testing.T, p *pbxProc, token, to string) (room, joinToken, url string) {
	t.Helper()
	code, m := deviceCall(t, p, "POST", "/v1/mobile/calls", token, fmt.Sprintf(`{"to":%q}`, to))
	c, _ := m["call"].(map[string]any)
	if code != 202 || c == nil {
		t.Fatalf("place a call to %s: %d %v", to, code, m)
	}
	room, _ = c["room"].(string)
	joinToken, _ = c["token"].(string)
	url, _ = c["url"].(string)
	if c["to"] != to || room == "" {
		t.Fatalf("placed call %v", c)
	}
	return room, joinToken, url
}

// authFailures is the guard's count of authentication failures (API).
func (m *mobileRig) authFailures(t *testing.T) int {
	var c struct {
		AuthFailures int `json:"auth_failures"`
	}
	m.api.getJSON("/v1/security/counters", &c)
	return c.AuthFailures
}

// refuseGrant sends the bridge's INVITE for to with grant (SIPp) and
// requires the PBX's 403.
func (m *mobileRig) refuseGrant(t *testing.T, dir, name, to, grant string) {
	t.Helper()
	r := startSIPp(t, dir, name, 15*time.Second, fmt.Sprintf("127.0.0.1:%d", m.p.sipPort), "-sf", "uac_grant.xml",
		"-key", "grant", grant, "-s", to, "-m", "1", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := r.wait(); code != 0 {
		t.Fatalf("%s grant: want 403; sipp exit %d\n%s", name, code, r.errors(dir))
	}
}

// grantOf is the call grant the PBX gave the room service for room.
func (m *mobileRig) grantOf(t *testing.T, room string) string {
	t.Helper()
	c, ok := m.rs.WaitCall("CreateSIPParticipant", room, 5*time.Second)
	if !ok || c.Trunk != "ST_pbx" || c.Headers[mobile.HeaderGrant] == "" {
		t.Fatalf("CreateSIPParticipant for %s: %+v (found %v)", room, c, ok)
	}
	return c.Headers[mobile.HeaderGrant]
}

// TestMobileAppCallAndGrants: alice's app places a call to carol (102)
// over HTTP; the room service's bridge dials the PBX with X-Pbx-Token and
// the call reaches carol's SIPp as from 100. The bridge's grant replayed,
// a grant presented for another number, one presented after its life
// (shortened to 2 s by PBX_TEST_GRANT_TTL) and one issued before a restart
// are each refused with 403 and counted as authentication failures.
func TestMobileAppCallAndGrants(t *testing.T) {
	const grantTTL = 2 * time.Second
	t.Setenv("PBX_TEST_GRANT_TTL", grantTTL.String())
	m := startMobileRig(t)
	alice := deviceLogin(t, m.p, "alice", "alice-secret", "alice-phone")
	dir := scenarioDir(t, map[string]string{"carol.csv": credentials("carol")})
	carolPort := freePort(t)
	registerSIPp(t, m.p, dir, "udp", "carol", carolPort)
	carol := startSIPp(t, dir, "carol", 30*time.Second, fmt.Sprintf("127.0.0.1:%d", m.p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(carolPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it

	room, tok, url := placeCall(t, m.p, alice, "102")
	if url != m.wsURL {
		t.Fatalf("placed call url %q, want %q", url, m.wsURL)
	}
	checkJoinToken(t, tok, room, "device-alice-phone")
	select {
	case d := <-m.rs.Bridge.Dials():
		if d.Status != 200 || d.Room != room || d.To != "102" {
			t.Fatalf("bridge dial %+v, want 200 for %s", d, room)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the bridge's call was not answered\n%s", carol.errors(dir))
	}
	msgs := sippSaw(t, dir, carol, "INVITE sip:", 5*time.Second)
	from := ""
	for _, l := range strings.Split(msgs, "\n") {
		if strings.HasPrefix(strings.ToLower(l), "from:") {
			from = l
			break
		}
	}
	if !strings.Contains(from, "sip:100@") {
		t.Fatalf("carol sees %q, want alice's extension 100", from)
	}
	grant := m.grantOf(t, room)
	m.deleteRoom(t, room) // the app leaves: the bridge hangs up
	if code := carol.wait(); code != 0 {
		t.Fatalf("carol: sipp exit %d\n%s", code, carol.errors(dir))
	}

	// The app call is alice's: her device's call log lists it.
	waitFor(t, "the app call in alice's call log", 10*time.Second, func() bool {
		code, page := deviceCall(t, m.p, "GET", "/v1/mobile/cdr", alice, "")
		if code != 200 {
			t.Fatalf("alice's call log: %d %v", code, page)
		}
		recs, _ := page["records"].([]any)
		for _, r := range recs {
			e := r.(map[string]any)
			if e["from"] == "100" && e["to"] == "102" && e["answered"] == true {
				return true
			}
		}
		return false
	})

	before := m.authFailures(t)
	m.refuseGrant(t, dir, "replayed", "102", grant)
	// Grants the bridge never uses: it dials nowhere from now on.
	sink, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	m.rs.Bridge.SetPBX(sink.LocalAddr().(*net.UDPAddr).AddrPort())
	room2, _, _ := placeCall(t, m.p, alice, "102")
	m.refuseGrant(t, dir, "another-number", "101", m.grantOf(t, room2))
	room4, _, _ := placeCall(t, m.p, alice, "102")
	grant4 := m.grantOf(t, room4)
	time.Sleep(grantTTL + 500*time.Millisecond) // the grant's life, and some
	m.refuseGrant(t, dir, "expired", "102", grant4)
	if n := m.authFailures(t) - before; n != 3 {
		t.Fatalf("%d authentication failures counted for 3 refused grants", n)
	}
	room3, _, _ := placeCall(t, m.p, alice, "102")
	grant3 := m.grantOf(t, room3)
	m.p.stop()
	m.p.start()
	m.refuseGrant(t, dir, "after-restart", "102", grant3)
	if n := m.authFailures(t); n != 1 {
		t.Fatalf("%d authentication failures counted since the restart, want 1", n)
	}
	if !m.p.log.ContainsSince("bad call grant") {
		t.Fatal("refused grant not logged")
	}
}

// deleteRoom deletes room at the room service as its operator would (the
// bridge then ends the room's SIP participants).
func (m *mobileRig) deleteRoom(t *testing.T, room string) {
	t.Helper()
	at := auth.NewAccessToken(rsKey, rsSecret).SetVideoGrant(&auth.VideoGrant{RoomCreate: true}).SetValidFor(time.Minute)
	jwt, err := at.ToJWT()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.NewReader(fmt.Sprintf(`{"room":%q}`, room))
	req, _ := http.NewRequest("POST", m.rs.URL+"/twirp/livekit.RoomService/DeleteRoom", body)
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("delete room %s: %d", room, res.StatusCode)
	}
}

// TestDeviceTokensRevokedAtOnce: a refresh makes the old token 401 at
// once (and after a restart), logout and the operator's removal likewise.
func TestDeviceTokensRevokedAtOnce(t *testing.T) {
	p := startPBX(t, pbxConfig{APIPort: freePort(t), APIRate: 6000,
		Tokens: "      - name: mobile-ops\n        token: " + mobileOperator + "\n        scopes: [mobile:read, mobile:manage]\n"})
	old := deviceLogin(t, p, "alice", "alice-secret", "alice-phone")
	code, m := deviceCall(t, p, "POST", "/v1/mobile/token/refresh", old, "")
	fresh, _ := m["token"].(string)
	if code != 200 || !strings.HasPrefix(fresh, "pbxd_") || fresh == old {
		t.Fatalf("refresh: %d %v", code, m)
	}
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", old, ""); code != 401 {
		t.Fatalf("the refreshed token right after: %d, want 401", code)
	}
	if code, _ := deviceCall(t, p, "POST", "/v1/mobile/token/refresh", old, ""); code != 401 {
		t.Fatalf("refreshing the refreshed token: %d, want 401", code)
	}
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", fresh, ""); code != 200 {
		t.Fatalf("the new token: %d", code)
	}
	p.stop()
	p.start()
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", old, ""); code != 401 {
		t.Fatalf("the refreshed token after a restart: %d, want 401", code)
	}
	if code, _ := deviceCall(t, p, "POST", "/v1/mobile/logout", fresh, ""); code != 204 {
		t.Fatalf("logout: %d", code)
	}
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", fresh, ""); code != 401 {
		t.Fatalf("the token right after logout: %d, want 401", code)
	}
	bob := deviceLogin(t, p, "bob", "bob-secret", "bob-phone")
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", bob, ""); code != 200 {
		t.Fatalf("bob's token: %d", code)
	}
	if code, _ := deviceCall(t, p, "DELETE", "/v1/mobile/devices/demo/bob-phone", mobileOperator, ""); code != 204 {
		t.Fatalf("operator removal: %d", code)
	}
	if code, _ := deviceCall(t, p, "GET", "/v1/mobile/me", bob, ""); code != 401 {
		t.Fatalf("the token right after its removal: %d, want 401", code)
	}
	if code, m := deviceCall(t, p, "GET", "/v1/mobile/devices", mobileOperator, ""); code != 200 || len(m["devices"].([]any)) != 0 {
		t.Fatalf("devices after logout and removal: %d %v", code, m)
	}
}

// BenchmarkMobileRingingLatencyE2E measures, with bin/pbx, the time from a
// caller's INVITE leaving (on loopback: arriving; the digest round trip
// included) to the mobile.ringing request reaching the tenant backend
// (signature checked), through the room's creation at the double. Bob has
// only his app; each call is cancelled once rung. Reports p50 and p99 in
// ms.
func BenchmarkMobileRingingLatencyE2E(b *testing.B) {
	m := newMobileRig(b)
	res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/mobile/login", m.p.apiPort), "application/json", strings.NewReader(
		`{"domain":"127.0.0.1","username":"bob","password":"bob-secret","device":{"id":"bob-phone","platform":"android"}}`))
	if err != nil || res.StatusCode != 200 {
		b.Fatalf("login: %v %v", res, err)
	}
	res.Body.Close()
	alice := siptest.NewPhone(b, siptest.Options{Username: "alice", Password: "alice-secret", Domain: "127.0.0.1",
		PBX: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(m.p.sipPort))})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		call := alice.Dial(ctx, "101")
		hit := m.hooks.wait(b, mobile.EventRinging, i+1, 10*time.Second)[i]
		lat = append(lat, hit.At.Sub(start))
		select {
		case <-call.Ringing():
		case <-call.Done():
		}
		cancel()
		<-call.Done()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99_ms")
}
