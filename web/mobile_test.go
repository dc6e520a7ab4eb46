package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	amobile "pbx/appliance/mobile"
	"pbx/db"
	"pbx/sipcore/calls"
	"pbx/web/api"
	"pbx/web/mobile"
)

// accounts of the device API tests: acme (acme.test) and globex.
type mobileDir struct{}

var mobileAccounts = []amobile.Account{
	{Tenant: "acme", Username: "alice", Password: "alice-pw", Extension: "100", DisplayName: "Alice", Domain: "acme.test"},
	{Tenant: "acme", Username: "bob", Password: "bob-pw", Extension: "101", Domain: "acme.test"},
	{Tenant: "globex", Username: "carol", Password: "carol-pw", Extension: "100", Domain: "globex.test"},
}

func (mobileDir) Account(domain, username string) (amobile.Account, bool) {
	for _, a := range mobileAccounts {
		if a.Domain == domain && a.Username == username {
			return a, true
		}
	}
	return amobile.Account{}, false
}

func (mobileDir) ByName(tenant, username string) (amobile.Account, bool) {
	for _, a := range mobileAccounts {
		if a.Tenant == tenant && a.Username == username {
			return a, true
		}
	}
	return amobile.Account{}, false
}

// fakeCalls stands for the room service side, which another package
// implements.
type fakeRoomCalls struct{}

func (fakeRoomCalls) Place(_ context.Context, s amobile.Session, to string) (amobile.Call, error) {
	if to == "bad" {
		return amobile.Call{}, amobile.ErrBadDestination
	}
	return amobile.Call{Room: "pbx-r1", Token: "jwt", URL: "wss://rooms.test", To: to, ExpiresAt: time.Now().Add(time.Minute)}, nil
}

func (fakeRoomCalls) RoomToken(_ context.Context, s amobile.Session, room string) (amobile.JoinToken, error) {
	if room != "pbx-mine" || s.Device.Extension != "100" {
		return amobile.JoinToken{}, amobile.ErrRoomNotFound
	}
	return amobile.JoinToken{Token: "jwt2", URL: "wss://rooms.test", ExpiresAt: time.Now().Add(2 * time.Minute)}, nil
}

type mobileEnv struct {
	*env
	sessions *amobile.Sessions
	mu       sync.Mutex
	guard    []string
	skew     atomic.Int64 // added to the sessions' clock
}

func newMobileEnv(t testing.TB, mods ...envOption) *mobileEnv {
	t.Helper()
	bdb, err := db.Open(t.TempDir(), db.Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bdb.Close() })
	me := &mobileEnv{}
	me.sessions, err = amobile.NewSessions(amobile.SessionOptions{Store: bdb.Devices(), Directory: mobileDir{},
		Now: func() time.Time { return time.Now().Add(time.Duration(me.skew.Load())) },
		OnAuthFailure: func(src netip.AddrPort, domain, user string) {
			me.mu.Lock()
			me.guard = append(me.guard, domain+"/"+user)
			me.mu.Unlock()
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mods = append([]envOption{func(_ *config.API, o *Options) {
		o.Backends.Devices = mobile.Operator(me.sessions)
		o.Mobile = &mobile.Options{Sessions: me.sessions, CallLog: o.Backends.CallLog,
			RoomServiceURL: func(tenant string) string {
				if tenant == "acme" {
					return "wss://rooms.test"
				}
				return ""
			}}
	}}, mods...)
	me.env = newEnv(t, mods...)
	return me
}

// send makes a request with a body.
func (e *env) send(c *http.Client, method, path, token, body string, hdr ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = e.client
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func loginBody(domain, user, pw, dev string) string {
	return `{"domain":"` + domain + `","username":"` + user + `","password":"` + pw +
		`","device":{"id":"` + dev + `","platform":"android","push":{"fcm":"reg-1"}}}`
}

// login logs a device in and returns its token.
func (m *mobileEnv) login(user, dev string) string {
	m.t.Helper()
	domain := "acme.test"
	if user == "carol" {
		domain = "globex.test"
	}
	r := m.send(m.freshPeer(), "POST", "/v1/mobile/login", "", loginBody(domain, user, user+"-pw", dev))
	if r.status != 200 {
		m.t.Fatalf("login %s: %d %s", user, r.status, r.body)
	}
	return r.json(m.t)["token"].(string)
}

func TestDeviceSessionLifecycle(t *testing.T) {
	m := newMobileEnv(t)
	r := m.send(nil, "POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "alice-pw", "pixel-7"))
	if r.status != 200 {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	var body struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
		Device    struct {
			ID, Platform string
			Push         map[string]string
		} `json:"device"`
		Account struct {
			Tenant, Username, Extension string
			DisplayName                 string `json:"display_name"`
		} `json:"account"`
		RoomService *struct{ URL string } `json:"roomservice"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body.Token, "pbxd_") || body.Device.ID != "pixel-7" || body.Device.Platform != "android" ||
		body.Device.Push["fcm"] != "reg-1" || body.Account.Extension != "100" || body.Account.DisplayName != "Alice" ||
		body.RoomService == nil || body.RoomService.URL != "wss://rooms.test" || time.Until(body.ExpiresAt) < 29*24*time.Hour {
		t.Fatalf("login body: %s", r.body)
	}
	tok := body.Token
	if r := m.get("/v1/mobile/me", tok); r.status != 200 || !strings.Contains(string(r.body), `"username":"alice"`) {
		t.Fatalf("me: %d %s", r.status, r.body)
	}
	r = m.send(nil, "PUT", "/v1/mobile/device", tok, `{"push":{"fcm":"reg-2","extra":{"a":1}}}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"fcm":"reg-2"`) {
		t.Fatalf("put device: %d %s", r.status, r.body)
	}
	if r := m.get("/v1/mobile/me", tok); !strings.Contains(string(r.body), `"extra":{"a":1}`) {
		t.Fatalf("push not stored as given: %s", r.body)
	}
	// Refresh: a new token, the old one refused at once.
	r = m.send(nil, "POST", "/v1/mobile/token/refresh", tok, "")
	if r.status != 200 {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	nt := r.json(t)["token"].(string)
	if nt == tok {
		t.Fatal("refresh returned the same token")
	}
	if r := m.get("/v1/mobile/me", tok); r.status != 401 || r.errCode() != "unauthorized" {
		t.Fatalf("old token after refresh: %d %s", r.status, r.body)
	}
	if r := m.send(nil, "POST", "/v1/mobile/token/refresh", tok, ""); r.status != 401 {
		t.Fatalf("refresh with the old token: %d", r.status)
	}
	// Logout: 204, then the token is dead.
	if r := m.send(nil, "POST", "/v1/mobile/logout", nt, ""); r.status != 204 || len(r.body) != 0 {
		t.Fatalf("logout: %d %s", r.status, r.body)
	}
	if r := m.get("/v1/mobile/me", nt); r.status != 401 {
		t.Fatalf("token after logout: %d", r.status)
	}
}

func TestDeviceRoutesRefuseOtherTokens(t *testing.T) {
	m := newMobileEnv(t)
	dev := m.login("alice", "d1")
	paths := []struct{ method, path, body string }{
		{"POST", "/v1/mobile/token/refresh", ""}, {"POST", "/v1/mobile/logout", ""}, {"GET", "/v1/mobile/me", ""},
		{"PUT", "/v1/mobile/device", `{"push":{}}`}, {"GET", "/v1/mobile/cdr", ""}, {"GET", "/v1/mobile/voicemail", ""},
		{"GET", "/v1/mobile/voicemail/m1", ""}, {"GET", "/v1/mobile/voicemail/m1/audio", ""},
		{"DELETE", "/v1/mobile/voicemail/m1", ""}, {"POST", "/v1/mobile/calls", `{"to":"101"}`},
		{"POST", "/v1/mobile/roomservice/token", `{"room":"x"}`},
	}
	for _, p := range paths {
		for name, tok := range map[string]string{"none": "", "operator": secretAdmin, "unknown": "pbxd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
			"garbage": "pbxd_x y"} {
			r := m.send(m.freshPeer(), p.method, p.path, tok, p.body)
			if r.status != 401 || r.errCode() != "unauthorized" || r.header.Get("X-Request-Id") == "" || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %s token: %d %s", p.method, p.path, name, r.status, r.body)
			}
		}
	}
	// A device token opens no operator route.
	for _, p := range []string{"/v1/status", "/v1/mobile/devices", "/v1/cdr"} {
		if r := m.do(m.freshPeer(), "GET", p, dev); r.status != 401 {
			t.Errorf("device token on %s: %d", p, r.status)
		}
	}
	if r := m.do(m.freshPeer(), "DELETE", "/v1/mobile/devices/acme/d1", dev); r.status != 401 {
		t.Errorf("device token on the operator DELETE: %d", r.status)
	}
	// Failed device authentications share the peer's bucket: 429 after the burst.
	peer := m.freshPeer()
	var last response
	for range 8 {
		last = m.do(peer, "GET", "/v1/mobile/me", "pbxd_nope")
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" {
		t.Fatalf("failed device authentications not limited: %d", last.status)
	}
}

func TestDeviceTokenExpires(t *testing.T) {
	m := newMobileEnv(t)
	tok := m.login("alice", "d1")
	m.skew.Store(int64(30*24*time.Hour - time.Minute))
	r := m.send(nil, "POST", "/v1/mobile/token/refresh", tok, "")
	if r.status != 200 {
		t.Fatalf("refresh a minute before expiry: %d %s", r.status, r.body)
	}
	fresh := r.json(t)["token"].(string)
	m.skew.Store(int64(30*24*time.Hour + time.Minute))
	if r := m.get("/v1/mobile/me", tok); r.status != 401 {
		t.Fatalf("old token: %d", r.status)
	}
	if r := m.get("/v1/mobile/me", fresh); r.status != 200 {
		t.Fatalf("refreshed token a day later: %d", r.status)
	}
	m.skew.Store(int64(60 * 24 * time.Hour))
	for _, p := range []string{"/v1/mobile/me", "/v1/mobile/cdr"} {
		if r := m.get(p, fresh); r.status != 401 || r.errCode() != "unauthorized" {
			t.Fatalf("expired token on %s: %d %s", p, r.status, r.body)
		}
	}
	if r := m.send(nil, "POST", "/v1/mobile/token/refresh", fresh, ""); r.status != 401 {
		t.Fatalf("refresh of an expired token: %d", r.status)
	}
}

func TestDeviceLoginFailures(t *testing.T) {
	m := newMobileEnv(t)
	peer := m.freshPeer()
	wrong := m.send(peer, "POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "nope", "d"))
	unknown := m.send(peer, "POST", "/v1/mobile/login", "", loginBody("acme.test", "mallory", "nope", "d"))
	strip := func(r response) string {
		var env struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(r.body, &env)
		return env.Error.Code + "|" + env.Error.Message
	}
	if wrong.status != 401 || unknown.status != 401 || strip(wrong) != "unauthorized|invalid credentials" || strip(wrong) != strip(unknown) {
		t.Fatalf("wrong password %d %s; unknown user %d %s", wrong.status, wrong.body, unknown.status, unknown.body)
	}
	m.mu.Lock()
	told := strings.Join(m.guard, ",")
	m.mu.Unlock()
	if told != "acme.test/alice,acme.test/mallory" {
		t.Fatalf("guard told %q", told)
	}
	// The account's bucket: 5 failures in 15 minutes, from any peer.
	for range 4 {
		m.send(m.freshPeer(), "POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "nope", "d"))
	}
	r := m.send(m.freshPeer(), "POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "alice-pw", "d"))
	if r.status != 429 || r.errCode() != "rate_limited" {
		t.Fatalf("after 5 failures: %d %s", r.status, r.body)
	}
	if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	// The source's bucket: 20 a minute across accounts.
	src := m.freshPeer()
	for i := range 20 {
		if r := m.send(src, "POST", "/v1/mobile/login", "", loginBody("acme.test", "u"+string(rune('a'+i%5)), "x", "d")); r.status != 401 {
			t.Fatalf("failure %d: %d", i, r.status)
		}
	}
	if r := m.send(src, "POST", "/v1/mobile/login", "", loginBody("acme.test", "bob", "bob-pw", "d")); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("21st from one source: %d %s", r.status, r.body)
	}
}

func TestDeviceBadRequests(t *testing.T) {
	m := newMobileEnv(t)
	tok := m.login("alice", "d1")
	cases := []struct{ method, path, token, body, ctype string }{
		{"POST", "/v1/mobile/login", "", "", ""},
		{"POST", "/v1/mobile/login", "", "{", ""},
		{"POST", "/v1/mobile/login", "", `{"domain":"acme.test"}`, ""},
		{"POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "alice-pw", "d") + "{}", ""},
		{"POST", "/v1/mobile/login", "", strings.Replace(loginBody("acme.test", "alice", "alice-pw", "d"), `"domain"`, `"extra":1,"domain"`, 1), ""},
		{"POST", "/v1/mobile/login", "", strings.Replace(loginBody("acme.test", "alice", "alice-pw", "d"), "android", "symbian", 1), ""},
		{"POST", "/v1/mobile/login", "", strings.Replace(loginBody("acme.test", "alice", "alice-pw", "d"), `{"fcm":"reg-1"}`, `"str"`, 1), ""},
		{"POST", "/v1/mobile/login", "", `{"password":"` + strings.Repeat("x", 20000) + `"}`, ""},
		{"POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "alice-pw", "d"), "text/plain"},
		{"POST", "/v1/mobile/login?x=1", "", loginBody("acme.test", "alice", "alice-pw", "d"), ""},
		{"POST", "/v1/mobile/logout", tok, `{}`, ""},
		{"POST", "/v1/mobile/token/refresh", tok, `{}`, ""},
		{"GET", "/v1/mobile/me?tenant=acme", tok, "", ""},
		{"PUT", "/v1/mobile/device", tok, `{}`, ""},
		{"PUT", "/v1/mobile/device", tok, `{"push":[1]}`, ""},
		{"GET", "/v1/mobile/cdr?extension=101", tok, "", ""},
		{"GET", "/v1/mobile/cdr?limit=0", tok, "", ""},
		{"GET", "/v1/mobile/cdr?from=2026-11-21T00:00:00Z&to=2026-11-20T00:00:00Z", tok, "", ""},
		{"GET", "/v1/mobile/cdr?cursor=nonsense", tok, "", ""},
	}
	for _, c := range cases {
		var hdr []string
		if c.ctype != "" {
			hdr = []string{"Content-Type", c.ctype}
		}
		r := m.send(m.freshPeer(), c.method, c.path, c.token, c.body, hdr...)
		if r.status != 400 || r.errCode() != "invalid_request" {
			t.Errorf("%s %s %.60q: %d %s", c.method, c.path, c.body, r.status, r.body)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.guard) != 0 {
		t.Fatalf("malformed logins reached the guard: %q", m.guard)
	}
}

func TestDeviceComponentsNotRunning(t *testing.T) {
	m := newMobileEnv(t, func(_ *config.API, o *Options) { o.Mobile.CallLog = nil })
	tok := m.login("alice", "d1")
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/v1/mobile/voicemail", "", "voicemail is not running"},
		{"GET", "/v1/mobile/voicemail/m1", "", "voicemail is not running"},
		{"GET", "/v1/mobile/voicemail/m1/audio", "", "voicemail is not running"},
		{"DELETE", "/v1/mobile/voicemail/m1", "", "voicemail is not running"},
		{"POST", "/v1/mobile/calls", `{"to":"101"}`, "room service is not running"},
		{"POST", "/v1/mobile/roomservice/token", `{"room":"r"}`, "room service is not running"},
		{"GET", "/v1/mobile/cdr", "", "call log is not running"},
	} {
		r := m.send(nil, c.method, c.path, tok, c.body)
		if r.status != 404 || r.errCode() != "not_found" || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
}

func TestDeviceAPINotRunning(t *testing.T) {
	e := newEnv(t)
	r := e.send(nil, "POST", "/v1/mobile/login", "", loginBody("acme.test", "alice", "alice-pw", "d"))
	if r.status != 404 || !strings.Contains(string(r.body), "the device API is not running") {
		t.Fatalf("login without sessions: %d %s", r.status, r.body)
	}
}

func TestDeviceCallRoutes(t *testing.T) {
	m := newMobileEnv(t, func(_ *config.API, o *Options) { o.Mobile.Calls = fakeRoomCalls{} })
	alice, bob := m.login("alice", "d1"), m.login("bob", "d2")
	r := m.send(nil, "POST", "/v1/mobile/calls", alice, `{"to":"+15550001"}`)
	if r.status != 202 || !strings.Contains(string(r.body), `"call":{"room":"pbx-r1","token":"jwt","url":"wss://rooms.test","to":"+15550001","expires_at":`) {
		t.Fatalf("calls: %d %s", r.status, r.body)
	}
	if r := m.send(nil, "POST", "/v1/mobile/calls", alice, `{"to":"bad"}`); r.status != 400 {
		t.Fatalf("bad destination: %d %s", r.status, r.body)
	}
	if r := m.send(nil, "POST", "/v1/mobile/calls", alice, `{"to":""}`); r.status != 400 {
		t.Fatalf("empty destination: %d", r.status)
	}
	if r := m.send(nil, "POST", "/v1/mobile/roomservice/token", alice, `{"room":"pbx-mine"}`); r.status != 200 || !strings.Contains(string(r.body), `"token":"jwt2"`) {
		t.Fatalf("room token: %d %s", r.status, r.body)
	}
	// A room not offered to the extension is 404, never 403.
	if r := m.send(nil, "POST", "/v1/mobile/roomservice/token", bob, `{"room":"pbx-mine"}`); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("room of another extension: %d %s", r.status, r.body)
	}
}

func TestDeviceConventions(t *testing.T) {
	m := newMobileEnv(t)
	tok := m.login("alice", "d1")
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/mobile/login", "POST"},
		{"DELETE", "/v1/mobile/me", "GET, HEAD"},
		{"POST", "/v1/mobile/voicemail/m1", "GET, HEAD, DELETE"},
		{"GET", "/v1/mobile/device", "PUT"},
		{"POST", "/v1/mobile/devices", "GET, HEAD"},
	} {
		r := m.send(nil, c.method, c.path, tok, "")
		if r.status != 405 || r.header.Get("Allow") != c.allow || r.errCode() != "invalid_request" {
			t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, r.status, r.header.Get("Allow"), r.body)
		}
	}
	if r := m.do(nil, "HEAD", "/v1/mobile/me", tok); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("HEAD me: %d %q", r.status, r.body)
	}
	if r := m.do(nil, "GET", "/v1/mobile/me", tok, "X-Request-Id", "device-req-0001"); r.header.Get("X-Request-Id") != "device-req-0001" {
		t.Fatalf("request id not echoed: %q", r.header.Get("X-Request-Id"))
	}
	if r := m.get("/v1/mobile/nope", tok); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("unknown device path: %d %s", r.status, r.body)
	}
}

func TestDeviceRateLimit(t *testing.T) {
	m := newMobileEnv(t, func(a *config.API, _ *Options) { a.RateLimit = config.RateLimit{RequestsPerMinute: 60, Burst: 3} })
	tok := m.login("alice", "d1")
	var last response
	for range 4 {
		last = m.get("/v1/mobile/me", tok)
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" {
		t.Fatalf("4th request at burst 3: %d", last.status)
	}
	// Another device has its own bucket.
	if r := m.get("/v1/mobile/me", m.login("alice", "d2")); r.status != 200 {
		t.Fatalf("other device: %d", r.status)
	}
}

func TestDeviceCDR(t *testing.T) {
	m := newMobileEnv(t)
	base := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	for i, c := range []struct{ tenant, ext string }{{"acme", "100"}, {"acme", "101"}, {"globex", "100"}, {"acme", "100"}, {"acme", "100"}} {
		r := cdr.NewRecord(c.tenant, calls.DirectionInternal, base.Add(time.Duration(i)*time.Minute))
		r.From, r.To, r.Extension = "101", c.ext, c.ext
		r.Finish(r.Start.Add(10*time.Second), calls.CauseNoAnswer, 487, "")
		if err := m.store.Commit(r); err != nil {
			t.Fatal(err)
		}
	}
	// alice's internal call to 102 is hers; a trunk caller whose number
	// is "100" is not.
	for i, dir := range []calls.Direction{calls.DirectionInternal, calls.DirectionInbound} {
		r := cdr.NewRecord("acme", dir, base.Add(time.Duration(10+i)*time.Minute))
		r.From, r.To, r.Extension = "100", "102", "102"
		r.Finish(r.Start.Add(10*time.Second), calls.CauseNoAnswer, 487, "")
		if err := m.store.Commit(r); err != nil {
			t.Fatal(err)
		}
	}
	tok := m.login("alice", "d1")
	var page struct {
		Records []struct {
			Tenant, Extension, From string
			Direction               calls.Direction
		} `json:"records"`
		Next string `json:"next_cursor"`
	}
	seen := 0
	path := "/v1/mobile/cdr?limit=2"
	for range 5 {
		r := m.get(path, tok)
		if r.status != 200 {
			t.Fatalf("cdr: %d %s", r.status, r.body)
		}
		page.Next = ""
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, rec := range page.Records {
			if rec.Tenant != "acme" || rec.Extension != "100" && (rec.From != "100" || rec.Direction != calls.DirectionInternal) {
				t.Fatalf("another extension's call: %+v", rec)
			}
			seen++
		}
		if page.Next == "" {
			break
		}
		path = "/v1/mobile/cdr?limit=2&cursor=" + page.Next
	}
	if seen != 4 {
		t.Fatalf("%d records, want 4", seen)
	}
}

func TestOperatorDeviceRoutes(t *testing.T) {
	m := newMobileEnv(t)
	aliceTok := m.login("alice", "a-phone")
	m.login("carol", "c-phone")
	r := m.get("/v1/mobile/devices", scopeSecret("mobile:read"))
	if r.status != 200 || !strings.Contains(string(r.body), `"id":"a-phone"`) || !strings.Contains(string(r.body), `"id":"c-phone"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "pbxd_") || strings.Contains(string(r.body), "token") || strings.Contains(string(r.body), amobile.HashToken(aliceTok)) {
		t.Fatalf("a token (or its digest) listed: %s", r.body)
	}
	// The acme-restricted token sees acme only, and cannot remove globex's.
	r = m.get("/v1/mobile/devices", secretAcme)
	if r.status != 200 || strings.Contains(string(r.body), "c-phone") || !strings.Contains(string(r.body), "a-phone") {
		t.Fatalf("restricted list: %d %s", r.status, r.body)
	}
	if r := m.do(nil, "DELETE", "/v1/mobile/devices/globex/c-phone", secretAcme); r.status != 404 {
		t.Fatalf("restricted delete of another tenant's device: %d", r.status)
	}
	if r := m.do(nil, "DELETE", "/v1/mobile/devices/acme/a-phone", scopeSecret("mobile:read")); r.status != 403 {
		t.Fatalf("delete without mobile:manage: %d", r.status)
	}
	if r := m.do(nil, "DELETE", "/v1/mobile/devices/acme/a-phone", scopeSecret("mobile:manage")); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := m.get("/v1/mobile/me", aliceTok); r.status != 401 {
		t.Fatalf("revoked device still works: %d", r.status)
	}
	if r := m.do(nil, "DELETE", "/v1/mobile/devices/acme/a-phone", scopeSecret("mobile:manage")); r.status != 404 {
		t.Fatalf("second delete: %d", r.status)
	}
	logs := m.logs.String()
	if !strings.Contains(logs, `"action":"mobile.device.revoke"`) || !strings.Contains(logs, `"token":"only-mobile:manage"`) ||
		!strings.Contains(logs, `"deviceId":"a-phone"`) {
		t.Fatalf("revocation not audited:\n%s", logs)
	}
	if strings.Contains(logs, aliceTok) || strings.Contains(logs, "alice-pw") {
		t.Fatal("a device token or password reached the log")
	}
	// The operator routes still refuse what they did before.
	if r := m.do(m.freshPeer(), "GET", "/v1/mobile/devices", ""); r.status != 401 {
		t.Fatalf("list without a token: %d", r.status)
	}
	_ = api.ScopeMobileRead
}

type fakeWebhookStats struct{}

func (fakeWebhookStats) WebhookStats(context.Context) (api.WebhookStats, error) {
	return api.WebhookStats{
		Deliveries: map[[2]string]uint64{{"call.ended", "delivered"}: 5, {"mobile.ringing", "expired"}: 1},
		Attempts:   map[string]uint64{"ok": 5, "status": 3, "error": 2}, Queued: 4, InFlight: 2,
		Latency: api.Histogram{Buckets: map[float64]uint64{0.1: 6, 1: 10}, Count: 10, Sum: 1.5},
	}, nil
}

func TestWebhookMetrics(t *testing.T) {
	e := newEnv(t, func(_ *config.API, o *Options) { o.Backends.Webhooks = fakeWebhookStats{} })
	fams := scrape(t, e)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pbx_webhook_deliveries_total", []string{"event", "call.ended", "outcome", "delivered"}, 5},
		{"pbx_webhook_deliveries_total", []string{"event", "mobile.ringing", "outcome", "expired"}, 1},
		{"pbx_webhook_attempts_total", []string{"result", "status"}, 3},
		{"pbx_webhook_queue_depth", nil, 4},
		{"pbx_webhook_in_flight", nil, 2},
		{"pbx_webhook_attempt_seconds", nil, 10},
	} {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

// BenchmarkDeviceLogin: POST /v1/mobile/login through the whole stack
// (request id, JSON body, buckets, constant-time check, a bbolt write
// without fsync; BenchmarkLogin in appliance/mobile has the fsync), with
// its p99.
func BenchmarkDeviceLogin(b *testing.B) {
	m := newMobileEnv(b)
	h := m.srv.Handler()
	lat := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest("POST", "/v1/mobile/login", strings.NewReader(loginBody("acme.test", "alice", "alice-pw", "d"+strconv.Itoa(i%50))))
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		t0 := time.Now()
		h.ServeHTTP(rec, req)
		lat = append(lat, time.Since(t0))
		if rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
	b.ReportMetric(float64(len(lat))/time.Since(start).Seconds(), "logins/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
