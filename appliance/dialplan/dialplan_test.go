package dialplan

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/config"
	"pbx/appliance/guard"
	"pbx/appliance/routing"
	"pbx/appliance/tenant"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
)

const routerConfig = `configVersion: pbx/v1
kind: System
spec:
  sip:
    bindHost: 127.0.0.1
    transports: [udp, {transport: tcp, id: carrier-tcp}]
  defaultTrunk: tcp-carrier
  allowInterTenant: true
  dataDir: /var/lib/pbx-dialplan-test
  voicemail: {enabled: true}
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: demo}
spec:
  domain: demo.test
  allowInterTenant: true
  limits: {maxConcurrentPerAccount: 1}
  callerId: {number: "+15550100", name: Demo}
  ringGroups:
    - {name: seq, extensions: ["101", "103", "102"], strategy: sequential, ringTimeout: 4s}
  mailboxes:
    - {extension: "100"}
    - {extension: "101"}
---
configVersion: pbx/v1
kind: Account
metadata: {name: alice, tenant: demo}
spec: {password: a-secret-1, extension: "100", displayName: Alice}
---
configVersion: pbx/v1
kind: Account
metadata: {name: bob, tenant: demo}
spec: {password: b-secret-1, extension: "101", ringTimeout: 12s}
---
configVersion: pbx/v1
kind: Account
metadata: {name: carol, tenant: demo}
spec: {password: c-secret-1, extension: "102"}
---
configVersion: pbx/v1
kind: Account
metadata: {name: dave, tenant: demo}
spec: {password: d-secret-1, extension: "103"}
---
configVersion: pbx/v1
kind: InboundRoute
metadata: {name: main, tenant: demo}
spec: {did: "+15550100", destination: {type: ring_group, target: seq}}
---
configVersion: pbx/v1
kind: InboundRoute
metadata: {name: vm, tenant: demo}
spec: {did: "+15550101", destination: {type: voicemail, target: "101"}}
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: acme}
spec:
  domain: acme.test
  allowInterTenant: true
  limits: {maxConcurrentPerAccount: 5, maxOutboundPerMinute: 1}
---
configVersion: pbx/v1
kind: Account
metadata: {name: zed, tenant: acme}
spec: {password: z-secret-1, extension: "200"}
---
configVersion: pbx/v1
kind: InboundRoute
metadata: {name: forward, tenant: acme}
spec: {did: "+15550200", destination: {type: external, target: "0044207000"}}
---
configVersion: pbx/v1
kind: Trunk
metadata: {name: pinned}
spec:
  host: 127.0.0.7
  tenant: demo
---
configVersion: pbx/v1
kind: Trunk
metadata: {name: tcp-carrier}
spec:
  host: 127.0.0.8
  port: 5080
  transport: tcp
  transportId: carrier-tcp
  auth: {username: acct, password: acct-secret}
`

// fixedBindings is a registrar store holding bob's, carol's and zed's phones.
type fixedBindings []registrar.Binding

func (f fixedBindings) LoadBindings() ([]registrar.Binding, error)       { return f, nil }
func (f fixedBindings) SaveBindings([]registrar.Binding, []string) error { return nil }

func newTestRouter(t *testing.T) *Dialplan {
	t.Helper()
	return newTestRouterFrom(t, t.TempDir(), routerConfig)
}

// newTestRouterFrom is newTestRouter over another configuration (with the
// same accounts and bindings) in root.
func newTestRouterFrom(t *testing.T, root, text string) *Dialplan {
	t.Helper()
	cfg, rep := config.LoadBytes(root, "pbx.yaml", []byte(text), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		t.Fatalf("config: %v", rep.Err())
	}
	srv, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{
		{ID: "udp", Transport: "udp", BindHost: "127.0.0.1"}, {ID: "carrier-tcp", Transport: "tcp", BindHost: "127.0.0.1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	dir := tenant.New(cfg)
	auth, err := registrar.NewAuth(registrar.AuthOptions{}, dir.SIPAccounts())
	if err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour)
	binding := func(user, ext string, port int) registrar.Binding {
		contact := "sip:" + user + "@127.0.0.1:" + strconv.Itoa(port)
		tn := "demo"
		if user == "zed" {
			tn = "acme"
		}
		return registrar.Binding{Tenant: tn, Username: user, Extension: ext, Domain: tn + ".test", Contact: contact,
			Source: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)), Transport: "udp", Expires: far, Updated: time.Now(), Since: time.Now()}
	}
	reg, err := registrar.New(registrar.Options{Auth: auth, Store: fixedBindings{binding("bob", "101", 7001), binding("carol", "102", 7002), binding("zed", "200", 7003)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	trunks, err := trunk.New(TrunkSpecs(cfg.Trunks), trunk.Options{SIP: srv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Config: cfg, Directory: dir, Registrar: reg, SIP: srv, Trunks: trunks, Limits: guard.NewLimiter(cfg, nil)}, slog.New(slog.DiscardHandler))
}

func invite(t *testing.T, ruri, from string, hdrs ...sip.Header) *sip.Request {
	t.Helper()
	var u, f sip.Uri
	if err := sip.ParseUri(ruri, &u); err != nil {
		t.Fatal(err)
	}
	if err := sip.ParseUri(from, &f); err != nil {
		t.Fatal(err)
	}
	req := sip.NewRequest(sip.INVITE, u)
	fh := &sip.FromHeader{Address: f}
	fh.Params.Add("tag", "x")
	req.AppendHeader(fh)
	req.AppendHeader(&sip.ToHeader{Address: u})
	for _, h := range hdrs {
		req.AppendHeader(h)
	}
	return req
}

func TestIdentify(t *testing.T) {
	r := newTestRouter(t)
	trunkSrc := netip.MustParseAddrPort("127.0.0.7:5060")
	stranger := netip.MustParseAddrPort("127.0.0.99:5060")

	c, trusted, rej := r.Identify(invite(t, "sip:+15550100@127.0.0.1", "sip:+1999@127.0.0.7"), trunkSrc)
	if !trusted || rej != nil || c.Kind != b2bua.KindTrunk || c.Trunk != "pinned" || c.Tenant != "demo" {
		t.Errorf("trunk address: %+v %v %v", c, trusted, rej)
	}
	_, trusted, rej = r.Identify(invite(t, "sip:101@demo.test", "sip:alice@demo.test", sip.NewHeader("Proxy-Authorization", "Digest username=\"alice\"")), trunkSrc)
	if trusted || rej != nil {
		t.Errorf("credentials from a trunk address must go to digest: %v %v", trusted, rej)
	}
	_, trusted, rej = r.Identify(invite(t, "sip:+15550100@127.0.0.1", "sip:+1999@carrier.example"), stranger)
	if trusted || rej == nil || rej.Status != 403 {
		t.Errorf("stranger with a foreign From: %v %+v", trusted, rej)
	}
	_, trusted, rej = r.Identify(invite(t, "sip:101@demo.test", "sip:alice@demo.test"), stranger)
	if trusted || rej != nil {
		t.Errorf("a phone of demo.test must be challenged: %v %+v", trusted, rej)
	}
	_, trusted, rej = r.Identify(invite(t, "sip:+15550100@demo.test", "sip:+1999@carrier.example"), stranger)
	if trusted || rej != nil {
		t.Errorf("an INVITE for a tenant's domain must be challenged: %v %+v", trusted, rej)
	}
	_, trusted, rej = r.Identify(invite(t, "sip:+15550100@127.0.0.1", "sip:+1999@carrier.example", sip.NewHeader("X-Pbx-Token", "grant")), stranger)
	if trusted || rej == nil || rej.Status != 403 {
		t.Errorf("a room-service grant no room service minted must be refused: %v %+v", trusted, rej)
	}
}

func route(t *testing.T, r *Dialplan, in *b2bua.Inbound) b2bua.Decision {
	t.Helper()
	in.ID = b2bua.NewCallID(time.Now())
	return r.Route(context.Background(), in)
}

func TestRouteOutboundTrunkLeg(t *testing.T) {
	r := newTestRouter(t)
	in := &b2bua.Inbound{
		Caller:     b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100"},
		RequestURI: sip.Uri{User: "0123456", Host: "demo.test"}, To: sip.Uri{User: "0123456", Host: "demo.test"},
	}
	d := route(t, r, in)
	if d.Reject != nil || d.Target == nil || len(d.Target.Legs) != 1 {
		t.Fatalf("decision %+v", d)
	}
	leg, tg := d.Target.Legs[0], d.Target
	if leg.URI.String() != "sip:0123456@127.0.0.8:5080;transport=tcp" || leg.To.String() != "sip:0123456@127.0.0.8" {
		t.Errorf("uri %s to %s", leg.URI.String(), leg.To.String())
	}
	if leg.ListenerID != "carrier-tcp" || leg.Transport != "tcp" || leg.Destination != netip.MustParseAddrPort("127.0.0.8:5080") {
		t.Errorf("listener %q transport %q destination %v", leg.ListenerID, leg.Transport, leg.Destination)
	}
	if leg.Kind != b2bua.KindTrunk || leg.Name != "tcp-carrier" || leg.Auth == nil || leg.Auth.Username != "acct" || leg.Auth.Password != "acct-secret" {
		t.Errorf("leg %+v", leg)
	}
	if len(leg.Headers) != 1 || leg.Headers[0].Name() != "P-Asserted-Identity" || leg.Headers[0].Value() != `"Demo" <sip:+15550100@127.0.0.1>` {
		t.Errorf("headers %v", leg.Headers)
	}
	if tg.CallerID.User != "+15550100" || tg.CallerID.DisplayName != "Demo" {
		t.Errorf("caller id %+v", tg.CallerID)
	}
	want := b2bua.Meta{Tenant: "demo", Direction: "outbound", Extension: "100", DID: "+15550100", Trunk: "tcp-carrier", Domain: "demo.test"}
	if tg.Meta.Tenant != want.Tenant || tg.Meta.Direction != want.Direction || tg.Meta.Extension != want.Extension ||
		tg.Meta.DID != want.DID || tg.Meta.Trunk != want.Trunk || tg.Meta.Egress != b2bua.KindTrunk {
		t.Errorf("meta %+v, want %+v", tg.Meta, want)
	}
	st := r.steps.Get(in.ID)
	if len(st) != 2 || st[0].Type != routing.StepRoute || !strings.Contains(st[0].Result, "default trunk") || st[1].Type != routing.StepDial {
		t.Errorf("steps %+v", st)
	}
}

func TestRouteSequentialRingGroup(t *testing.T) {
	r := newTestRouter(t)
	in := &b2bua.Inbound{
		Caller: b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: "demo", Trunk: "pinned"},
		From:   sip.Uri{User: "+1999"}, FromName: "Caller",
		RequestURI: sip.Uri{User: "+15550100", Host: "127.0.0.1"}, To: sip.Uri{User: "+15550100", Host: "127.0.0.1"},
	}
	d := route(t, r, in)
	if d.Reject != nil || d.Target == nil {
		t.Fatalf("decision %+v", d)
	}
	legs := d.Target.Legs
	// 103 has no phone: it costs no ring time.
	if len(legs) != 2 || legs[0].Extension != "101" || legs[1].Extension != "102" {
		t.Fatalf("legs %+v", legs)
	}
	if legs[0].Delay != 0 || legs[1].Delay != 4*time.Second || legs[0].Timeout != 4*time.Second || legs[1].Timeout != 4*time.Second {
		t.Errorf("delays %v %v timeouts %v %v", legs[0].Delay, legs[1].Delay, legs[0].Timeout, legs[1].Timeout)
	}
	if d.Target.RingTimeout != 8*time.Second {
		t.Errorf("ring timeout %v", d.Target.RingTimeout)
	}
	m := d.Target.Meta
	if m.Direction != "inbound" || m.DID != "+15550100" || m.Trunk != "pinned" || m.Tenant != "demo" {
		t.Errorf("meta %+v", m)
	}
	if id := d.Target.CallerID; id.User != "+1999" || id.DisplayName != "Caller" || id.Host != "demo.test" {
		t.Errorf("caller id %+v", id)
	}
}

func TestRouteRejectionKeepsMeta(t *testing.T) {
	r := newTestRouter(t)
	in := &b2bua.Inbound{
		Caller:     b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: "demo", Trunk: "pinned"},
		RequestURI: sip.Uri{User: "+15550999"}, To: sip.Uri{User: "+15550999"},
	}
	d := route(t, r, in)
	if d.Reject == nil || d.Reject.Status != 404 || d.Reject.Cause != calls.CauseNoRoute || d.Target == nil || len(d.Target.Legs) != 0 {
		t.Fatalf("decision %+v", d)
	}
	if m := d.Target.Meta; m.Tenant != "demo" || m.Direction != "inbound" || m.DID != "+15550999" || m.Trunk != "pinned" {
		t.Errorf("meta %+v", m)
	}
	if st := r.steps.Get(in.ID); len(st) != 1 || st[0].Result != "no_route" || st[0].Error == "" {
		t.Errorf("steps %+v", st)
	}

	// An extension without a phone: 480, and the dial step says why.
	in = &b2bua.Inbound{
		Caller:     b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "bob", Extension: "101"},
		RequestURI: sip.Uri{User: "103", Host: "demo.test"}, To: sip.Uri{User: "103", Host: "demo.test"},
	}
	d = route(t, r, in)
	if d.Reject == nil || d.Reject.Status != 480 || d.Target.Meta.Extension != "103" || d.Target.Meta.Direction != "internal" {
		t.Fatalf("decision %+v %+v", d.Reject, d.Target)
	}
	if st := r.steps.Get(in.ID); len(st) != 1 || st[0].Type != "dial" || st[0].Result != "failed" {
		t.Errorf("steps %+v", st)
	}
	r.steps.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: in.ID}})
	if st := r.steps.Get(in.ID); len(st) != 0 {
		t.Errorf("steps kept after the call ended: %+v", st)
	}
}

// TestRouteReservesCallLimits: a second call of the same account while the first
// holds its place is refused 503 by maxConcurrentPerAccount; once the first call
// ends (the Limiter observes it) the account may call again.
func TestRouteReservesCallLimits(t *testing.T) {
	r := newTestRouter(t)
	call := func(id b2bua.CallID) b2bua.Decision {
		return r.Route(context.Background(), &b2bua.Inbound{
			ID:         id,
			Caller:     b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100"},
			RequestURI: sip.Uri{User: "101", Host: "demo.test"}, To: sip.Uri{User: "101", Host: "demo.test"},
		})
	}
	if d := call("c1"); d.Reject != nil {
		t.Fatalf("first call refused: %+v", d.Reject)
	}
	d := call("c2")
	if d.Reject == nil || d.Reject.Status != 503 || d.Reject.Cause != calls.CauseRejected {
		t.Fatalf("second concurrent call: %+v", d)
	}
	r.limits.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: "c1", Tenant: "demo"}})
	r.limits.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: "c2", Tenant: "demo"}})
	if d := call("c3"); d.Reject != nil {
		t.Fatalf("call after the first ended refused: %+v", d.Reject)
	}
}

// TestRouteInterTenantClaimsCallerTenant: alice of demo calling zed of acme
// takes a call of each tenant, and her per-account limit is demo's (1), not
// acme's (5): a second call of hers is refused although acme would take it.
func TestRouteInterTenantClaimsCallerTenant(t *testing.T) {
	r := newTestRouter(t)
	call := func(id b2bua.CallID) b2bua.Decision {
		return r.Route(context.Background(), &b2bua.Inbound{
			ID:         id,
			Caller:     b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100", DisplayName: "Alice"},
			From:       sip.Uri{User: "alice", Host: "demo.test"},
			RequestURI: sip.Uri{User: "200", Host: "acme.test"}, To: sip.Uri{User: "200", Host: "acme.test"},
		})
	}
	d := call("c1")
	if d.Reject != nil || len(d.Target.Legs) != 1 {
		t.Fatalf("inter-tenant call: %+v", d)
	}
	if m := d.Target.Meta; m.Tenant != "acme" || m.Direction != "internal" || m.Extension != "200" || m.Egress != "" || m.From != "100" || m.FromName != "Alice" {
		t.Errorf("meta %+v", m)
	}
	if a, dm := r.limits.Usage("acme").Active, r.limits.Usage("demo").Active; a != 1 || dm != 1 {
		t.Errorf("active acme %d demo %d, want 1 each", a, dm)
	}
	if d := call("c2"); d.Reject == nil || d.Reject.Status != 503 || !strings.Contains(d.Reject.Err.Error(), "maxConcurrentPerAccount") {
		t.Fatalf("alice's second call: %+v, want 503 by demo's maxConcurrentPerAccount", d.Reject)
	}
	r.limits.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: "c1"}})
	if a, dm := r.limits.Usage("acme").Active, r.limits.Usage("demo").Active; a != 0 || dm != 0 {
		t.Errorf("after the call: active acme %d demo %d", a, dm)
	}
}

// TestRouteForwardToCarrierIsOutbound: a carrier's call that acme's inbound
// route sends to an external number stays an inbound call on its record,
// but leaves on a trunk (Meta.Egress, what recording mode outbound reads)
// and so counts under acme's maxOutboundPerMinute.
func TestRouteForwardToCarrierIsOutbound(t *testing.T) {
	r := newTestRouter(t)
	call := func(id b2bua.CallID) b2bua.Decision {
		return r.Route(context.Background(), &b2bua.Inbound{
			ID:         id,
			Caller:     b2bua.Caller{Kind: b2bua.KindTrunk, Trunk: "tcp-carrier"},
			From:       sip.Uri{User: "+1999", Host: "carrier.example"},
			RequestURI: sip.Uri{User: "+15550200", Host: "127.0.0.1"}, To: sip.Uri{User: "+15550200", Host: "127.0.0.1"},
		})
	}
	d := call("f1")
	if d.Reject != nil || len(d.Target.Legs) != 1 || d.Target.Legs[0].Kind != b2bua.KindTrunk {
		t.Fatalf("forwarded call: %+v", d)
	}
	if m := d.Target.Meta; m.Tenant != "acme" || m.Direction != "inbound" || m.Egress != b2bua.KindTrunk || m.From != "+1999" {
		t.Errorf("meta %+v, want an inbound call of acme leaving on a trunk", m)
	}
	// The carrier sent no display name: the callee sees sip.contactUser.
	if id := d.Target.CallerID; id.User != "+1999" || id.DisplayName != config.DefaultUserAgent || d.Target.Meta.FromName != id.DisplayName {
		t.Errorf("caller id %+v, from_name %q", id, d.Target.Meta.FromName)
	}
	d = call("f2")
	if d.Reject == nil || d.Reject.Status != 403 || !strings.Contains(d.Reject.Err.Error(), "maxOutboundPerMinute") {
		t.Fatalf("second forwarded call within the minute: %+v, want 403 by maxOutboundPerMinute", d.Reject)
	}
}

// TestRouteNamesCallerForRecord: the record names a phone by its extension
// and the display name presented (its account's, else sip.contactUser),
// never its SIP username (the call log writes Meta.From and Meta.FromName:
// appliance's TestCallLogRecordsEachTenantsSide).
func TestRouteNamesCallerForRecord(t *testing.T) {
	r := newTestRouter(t)
	for _, tc := range []struct{ user, ext, to, from, name string }{
		{"alice", "100", "101", "100", "Alice"},
		{"bob", "101", "102", "101", config.DefaultUserAgent},
	} {
		d := route(t, r, &b2bua.Inbound{
			Caller:     b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: tc.user, Extension: tc.ext},
			From:       sip.Uri{User: tc.user, Host: "demo.test"},
			RequestURI: sip.Uri{User: tc.to, Host: "demo.test"}, To: sip.Uri{User: tc.to, Host: "demo.test"},
		})
		if d.Reject != nil {
			t.Fatalf("%s: %+v", tc.user, d.Reject)
		}
		if m, id := d.Target.Meta, d.Target.CallerID; m.From != tc.from || m.FromName != tc.name || id.DisplayName != tc.name {
			t.Errorf("%s: meta from %q name %q, presented %q; want %q %q", tc.user, m.From, m.FromName, id.DisplayName, tc.from, tc.name)
		}
	}
}
