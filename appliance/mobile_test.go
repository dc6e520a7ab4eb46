package appliance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/mobile"
	"pbx/appliance/mobile/roomtest"
	"pbx/sipcore"
	"pbx/sipcore/calls"
	"pbx/sipcore/siptest"
)

const (
	mobKey    = "APImobile"
	mobSecret = "mobile-test-secret-of-enough-length"
)

// hookReceiver is the tenant backend: it notes each webhook as its request
// arrives.
type hookReceiver struct {
	mu   sync.Mutex
	hits []hookHit
	from int // wait and events look at hits from here on
}

// mark makes wait ignore the webhooks received so far.
func (h *hookReceiver) mark() {
	h.mu.Lock()
	h.from = len(h.hits)
	h.mu.Unlock()
}

// since are the webhooks received since mark.
func (h *hookReceiver) since() []hookHit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookHit(nil), h.hits[h.from:]...)
}

type hookHit struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
	At    time.Time       `json:"-"`
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var hit hookHit
	_ = json.NewDecoder(r.Body).Decode(&hit)
	hit.At = at
	h.mu.Lock()
	h.hits = append(h.hits, hit)
	h.mu.Unlock()
}

func (h *hookReceiver) wait(t testing.TB, event string, n int, d time.Duration) []hookHit {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var out []hookHit
		for _, x := range h.since() {
			if x.Event == event {
				out = append(out, x)
			}
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

// postHooks sends webhooks as plain POSTs, returning once answered (so
// the request was on the wire): the stand-in for appliance/webhook.
type postHooks struct{ url string }

func (p postHooks) Send(tenant, event string, data any) error {
	body, err := json.Marshal(map[string]any{"event": event, "tenant": tenant, "data": data})
	if err != nil {
		return err
	}
	res, err := http.Post(p.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// devices is an in-process device sessions store.
type devices []mobile.Device

func (d devices) Devices(tenant, ext string) []mobile.Device {
	var out []mobile.Device
	for _, x := range d {
		if x.Tenant == tenant && x.Extension == ext {
			out = append(out, x)
		}
	}
	return out
}

// lockedBuffer collects the appliance's log for a failing test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type mobileEnv struct {
	a     *Appliance
	rs    *roomtest.Server
	hooks *hookReceiver
	sip   netip.AddrPort
}

func freeUDPPort(t testing.TB) int {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// startMobileEnv runs the appliance with a room service double (whose
// bridge challenges with digest and rings every 20 ms), a webhook receiver
// and bob's phone app (a device on extension 101).
func startMobileEnv(t testing.TB) *mobileEnv {
	rs := roomtest.Start(t, roomtest.Options{Key: mobKey, Secret: mobSecret, OutboundTrunkID: "ST_pbx",
		Username: "bridge", Password: "bridge-pw", RingEvery: 20 * time.Millisecond})
	hr := &hookReceiver{}
	hs := httptest.NewServer(hr)
	t.Cleanup(hs.Close)
	root := t.TempDir()
	doc := fmt.Sprintf(`configVersion: pbx/v1
kind: System
spec:
  sip:
    bindHost: 127.0.0.1
    bindPort: %d
    transports: [udp]
  dataDir: %s
  cdr:
    enabled: true
  roomservice:
    url: %s
    apiKey: %s
    apiSecret: %s
    sipHost: 127.0.0.1
    sipPort: %d
    sipTransport: udp
    auth: {username: bridge, password: bridge-pw}
    roomPrefix: pbx-
    outboundTrunkId: ST_pbx
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: demo}
spec:
  domain: 127.0.0.1
`, freeUDPPort(t), filepath.Join(root, "data"), strings.Replace(rs.URL, "http", "ws", 1), mobKey, mobSecret, rs.Bridge.Addr.Port())
	for i, name := range []string{"alice", "bob", "carol"} {
		doc += fmt.Sprintf("---\nconfigVersion: pbx/v1\nkind: Account\nmetadata: {name: %s, tenant: demo}\nspec:\n  password: %s-secret\n  extension: \"%d\"\n  displayName: %s\n",
			name, name, 100+i, strings.ToUpper(name[:1])+name[1:])
	}
	cfg, rep := config.LoadBytes(root, "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		t.Fatalf("config: %v", rep.Err())
	}
	devs := devices{{ID: "bob-phone", Platform: "ios", Push: json.RawMessage(`{"apns":"tok"}`), Tenant: "demo", Account: "bob", Extension: "101"}}
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("appliance log:\n%s", logs.String())
		}
	})
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := New(cfg, Options{Devices: devs, Webhooks: postHooks{hs.URL}}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; a.Close() })
	select {
	case <-a.SIP().Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("sip not ready")
	}
	var udp netip.AddrPort
	for _, l := range a.SIP().Listeners() {
		if l.Transport == sipcore.TransportUDP {
			udp, _ = a.SIP().Addr(l.ID)
		}
	}
	rs.Bridge.SetPBX(udp)
	return &mobileEnv{a: a, rs: rs, hooks: hr, sip: udp}
}

func (e *mobileEnv) phone(t testing.TB, user string, b siptest.Behaviour) *siptest.Phone {
	p := siptest.NewPhone(t, siptest.Options{Username: user, Password: user + "-secret", Domain: "127.0.0.1", PBX: e.sip})
	p.SetBehaviour(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.MustRegister(ctx, 300)
	t.Cleanup(func() { // the next test on this appliance must not ring it
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = p.Register(ctx, 0)
	})
	return p
}

func waitChan(t testing.TB, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// record waits for the call record of id.
func (e *mobileEnv) record(t testing.TB, id string) *cdr.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.a.cdr.Get(context.Background(), "demo", cdr.ID(id))
		if err == nil && r != nil && !r.End.IsZero() {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call record %s: %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMobile runs the mobile tests on one appliance with one room service
// double (a second appliance in the same process races with the first's
// sipgo goroutines on sipgo's globals).
func TestMobile(t *testing.T) {
	e := startMobileEnv(t)
	t.Run("AppCallThroughBridge", func(t *testing.T) { testAppCallThroughBridge(t, e) })
	t.Run("MobileLegWinsFork", func(t *testing.T) { testMobileLegWinsFork(t, e) })
	t.Run("DeskPhoneWinsMobileEnded", func(t *testing.T) { testDeskPhoneWinsMobileEnded(t, e) })
	t.Run("CallerCancelsMobileEnded", func(t *testing.T) { testCallerCancelsMobileEnded(t, e) })
}

// testMobileLegWinsFork: alice calls bob (101), whose desk phone rings
// and whose app has a session. mobile.ringing reaches the backend before
// the bridge gets the mobile leg's INVITE, which answers the bridge's 407
// with roomservice.auth and carries the device; the bridge's many 180s do
// not end the leg. When the app publishes, the mobile leg answers, the
// desk phone is cancelled, the record names the mobile leg the winner and
// no mobile.ended follows.
func testMobileLegWinsFork(t *testing.T, e *mobileEnv) {
	e.hooks.mark()
	desk := e.phone(t, "bob", siptest.Behaviour{Mode: siptest.Ring})
	alice := e.phone(t, "alice", siptest.Behaviour{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := alice.Dial(ctx, "101")

	ring := e.hooks.wait(t, mobile.EventRinging, 1, 10*time.Second)[0]
	var data mobile.RingingData
	if err := json.Unmarshal(ring.Data, &data); err != nil {
		t.Fatal(err)
	}
	inv, ok := e.rs.Bridge.WaitInvite(data.Room, 10*time.Second)
	if !ok {
		t.Fatalf("no INVITE for room %s at the bridge", data.Room)
	}
	if !ring.At.Before(inv.First) {
		t.Fatalf("mobile.ringing at %v, the bridge's first INVITE at %v: the webhook must come first", ring.At, inv.First)
	}
	if !inv.Challenged || inv.Headers[mobile.HeaderDevice] != "bob-phone" {
		t.Fatalf("invite %+v: want it authenticated after 407 and naming the device", inv)
	}
	if data.CallID == "" || data.Room != "pbx-"+data.CallID || data.Extension != "101" || data.Caller.Number != "100" || data.Caller.Name != "Alice" || data.Device.ID != "bob-phone" || data.Token == "" {
		t.Fatalf("ringing data %+v", data)
	}
	if c, ok := e.rs.WaitCall("CreateRoom", data.Room, time.Second); !ok || c.At.After(ring.At) {
		t.Fatalf("room created %v (found %v), after the webhook at %v", c.At, ok, ring.At)
	}
	deskCall := desk.WaitIncoming(10 * time.Second)
	if deskCall == nil {
		t.Fatal("desk phone not rung")
	}
	// More than ten provisional responses from the bridge.
	deadline := time.Now().Add(10 * time.Second)
	for e.rs.Bridge.Rings(data.Room) < 15 {
		if time.Now().After(deadline) {
			t.Fatalf("%d 180s from the bridge", e.rs.Bridge.Rings(data.Room))
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.rs.Bridge.Publish(data.Room)
	waitChan(t, call.Answered(), "answer through the mobile leg")
	waitChan(t, deskCall.Cancelled(), "cancel of the desk phone")
	// The app's audio (the bridge's RTP) reaches the caller through the PBX.
	if _, err := call.Media().WaitReceived(ctx, 10); err != nil {
		t.Fatalf("caller: %v", err)
	}
	if err := call.Hangup(ctx); err != nil {
		t.Fatal(err)
	}
	rec := e.record(t, data.CallID)
	won := ""
	for _, l := range rec.Legs {
		if l.Won {
			won = l.Kind + " " + l.Target
		}
	}
	if won != "mobile mobile:bob-phone" || rec.AnsweredBy != "101" {
		t.Fatalf("record legs %+v answered by %q: want the mobile leg the winner", rec.Legs, rec.AnsweredBy)
	}
	for deadline := time.Now().Add(5 * time.Second); e.a.mobile.Pending() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d offers still followed after the call ended", e.a.mobile.Pending())
		}
	}
	for _, h := range e.hooks.since() {
		if h.Event == mobile.EventEnded {
			t.Fatalf("mobile.ended for a won offer: %s", h.Data)
		}
	}
}

// testDeskPhoneWinsMobileEnded: the desk phone answers first: the mobile
// leg is cancelled, mobile.ended says answered_elsewhere, and the room is
// deleted 5 seconds later.
func testDeskPhoneWinsMobileEnded(t *testing.T, e *mobileEnv) {
	e.hooks.mark()
	e.phone(t, "bob", siptest.Behaviour{Mode: siptest.Answer, Delay: 300 * time.Millisecond})
	alice := e.phone(t, "alice", siptest.Behaviour{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := alice.Dial(ctx, "101")
	waitChan(t, call.Answered(), "answer by the desk phone")
	end := e.hooks.wait(t, mobile.EventEnded, 1, 10*time.Second)[0]
	var data mobile.EndedData
	if err := json.Unmarshal(end.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data.Outcome != mobile.OutcomeAnsweredElsewhere || data.Extension != "101" || data.Room != "pbx-"+data.CallID {
		t.Fatalf("mobile.ended %+v", data)
	}
	del, ok := e.rs.WaitCall("DeleteRoom", data.Room, 10*time.Second)
	if !ok {
		t.Fatal("room never deleted")
	}
	if d := del.At.Sub(end.At); d < mobile.DeleteDelay-100*time.Millisecond || d > mobile.DeleteDelay+2*time.Second {
		t.Fatalf("room deleted %v after mobile.ended, want about %v", d, mobile.DeleteDelay)
	}
	_ = call.Hangup(ctx)
	rec := e.record(t, data.CallID)
	for _, l := range rec.Legs {
		if l.Kind == "mobile" && (l.Won || l.Cause != calls.CauseCancelled) {
			t.Fatalf("mobile leg %+v", l)
		}
	}
}

// testAppCallThroughBridge: an app call placed by alice's app reaches
// carol's phone through the bridge's INVITE, authorised by its grant alone
// and presented as alice (100); the grant replayed, a grant for another
// number and an INVITE with no valid grant are refused with 403 and
// counted as authentication failures.
func testAppCallThroughBridge(t *testing.T, e *mobileEnv) {
	e.hooks.mark()
	carol := e.phone(t, "carol", siptest.Behaviour{Mode: siptest.Answer})
	ss := mobile.Session{Device: mobile.Device{Tenant: "demo", Account: "alice", Extension: "100", ID: "alice-phone"}}
	placed, err := e.a.Mobile().Place(context.Background(), ss, "102")
	if err != nil {
		t.Fatal(err)
	}
	in := carol.WaitIncoming(10 * time.Second)
	if in == nil {
		t.Fatal("carol not called")
	}
	if from := in.Invite.From(); from == nil || from.Address.User != "100" {
		t.Fatalf("carol sees %v, want alice's extension", in.Invite.From())
	}
	select {
	case d := <-e.rs.Bridge.Dials():
		if d.Status != 200 || d.Room != placed.Room {
			t.Fatalf("bridge dial %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bridge call not answered")
	}
	waitChan(t, in.Answered(), "carol's answer") // sets in.Media
	if _, err := in.Media().WaitReceived(context.Background(), 10); err != nil {
		t.Fatalf("callee: the app's audio through the bridge: %v", err)
	}
	c, _ := e.rs.WaitCall("CreateSIPParticipant", placed.Room, time.Second)
	grant := c.Headers[mobile.HeaderGrant]
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if err := in.Hangup(hctx); err != nil {
		t.Fatalf("carol hangs up: %v", err)
	}

	before := e.a.guard.Counters().AuthFailures
	mallory := siptest.NewPhone(t, siptest.Options{Username: "mallory", Domain: "127.0.0.1", PBX: e.sip})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other, _ := e.a.mobile.Grants().Mint(mobile.Grant{Tenant: "demo", Account: "alice", DeviceID: "alice-phone", To: "102"})
	for name, hdr := range map[string]string{"replayed": grant, "another number": other, "forged": "not-a-grant"} {
		to := "102"
		if name == "another number" {
			to = "101"
		}
		call := mallory.DialWith(ctx, to, sip.NewHeader(mobile.HeaderGrant, hdr))
		<-call.Done()
		if st, _ := call.Final(); st != 403 {
			t.Errorf("%s grant: %d, want 403", name, st)
		}
	}
	if n := e.a.guard.Counters().AuthFailures - before; n != 3 {
		t.Fatalf("%d authentication failures counted, want 3", n)
	}
}

// testCallerCancelsMobileEnded: the caller hangs up while the app is
// offered the call: mobile.ended says caller_cancelled.
func testCallerCancelsMobileEnded(t *testing.T, e *mobileEnv) {
	e.hooks.mark()
	alice := e.phone(t, "alice", siptest.Behaviour{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	callCtx, hangUp := context.WithCancel(ctx)
	call := alice.Dial(callCtx, "101")
	ring := e.hooks.wait(t, mobile.EventRinging, 1, 10*time.Second)[0]
	var rd mobile.RingingData
	_ = json.Unmarshal(ring.Data, &rd)
	if _, ok := e.rs.Bridge.WaitInvite(rd.Room, 10*time.Second); !ok {
		t.Fatal("no INVITE at the bridge")
	}
	waitChan(t, call.Ringing(), "ringing at the caller")
	hangUp()
	<-call.Done()
	end := e.hooks.wait(t, mobile.EventEnded, 1, 10*time.Second)[0]
	var data mobile.EndedData
	_ = json.Unmarshal(end.Data, &data)
	if data.Outcome != mobile.OutcomeCallerCancelled || data.Room != rd.Room {
		t.Fatalf("mobile.ended %+v, want caller_cancelled for %s", data, rd.Room)
	}
}

// BenchmarkMobileRingingLatency measures the time from a caller's INVITE
// leaving (on loopback: arriving) to the mobile.ringing request reaching
// the tenant backend, through the room creation at the double; the
// caller's extension has only the app, and each call is cancelled once
// rung. Reports p50 and p99 in ms.
func BenchmarkMobileRingingLatency(b *testing.B) {
	e := startMobileEnv(b)
	alice := e.phone(b, "alice", siptest.Behaviour{})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		call := alice.Dial(ctx, "101")
		hit := e.hooks.wait(b, mobile.EventRinging, i+1, 10*time.Second)[i]
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
