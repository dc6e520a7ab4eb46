package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// trunkPBX is a PBX with three tenants and carriers on their own loopback
// addresses:
//
//   - demo (domain 127.0.0.1; alice 100, bob 101, carol 102, dave 103), open
//     to other tenants; ring groups front (carol then bob, 2s each) and all
//     (both at once).
//   - acme (acme.test; zed 200), open to other tenants, its own caller id,
//     outbound routes and blocked prefixes.
//   - closed (closed.test; cleo 300), closed to other tenants.
//
// Carriers: "carrier" (127.0.0.2, shared), "local" (127.0.0.4, pinned to
// demo), "intl" (127.0.0.3) and "fallback" (127.0.0.5, System.defaultTrunk).
// registrarPort, when set, makes "carrier" register there with digest.
type trunkPBX struct {
	carrierPort, intlPort, localPort, fallbackPort int
	registrarPort                                  int
	// acmeLimits are more keys of acme's limits ("      key: value\n").
	acmeLimits string
	// beforeStart runs on the data directory before the PBX first starts.
	beforeStart func(dataDir string)
}

// Tokens of the management API restricted to one tenant of trunkPBX.
const (
	demoToken = "e2e-demo-only-token-0123456789abcdef"
	acmeToken = "e2e-acme-only-token-0123456789abcdef"
)

func (c trunkPBX) yaml(sipPort, apiPort, rtpMin int, dataDir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `configVersion: pbx/v1
kind: System
spec:
  sip:
    bindHost: 127.0.0.1
    bindPort: %d
    transports: [udp, tcp]
  media:
    rtpPortMin: %d
    rtpPortMax: %d
  dataDir: %s
  cdr: {enabled: true}
  allowInterTenant: true
  defaultTrunk: fallback
  security:
    limits:
      blockedPrefixes: ["00882"]
  api:
    enabled: true
    bindHost: 127.0.0.1
    bindPort: %d
    tokens:
      - name: e2e
        token: %s
        scopes: [status:read, cdr:read, operate]
      - name: demo-only
        token: %s
        scopes: [status:read, cdr:read]
        tenants: [demo]
      - name: acme-only
        token: %s
        scopes: [status:read, cdr:read]
        tenants: [acme]
`, sipPort, rtpMin, rtpMin+799, dataDir, apiPort, testToken, demoToken, acmeToken)
	doc := func(s string) { b.WriteString("---\nconfigVersion: pbx/v1\n" + s) }
	doc(`kind: Tenant
metadata: {name: demo}
spec:
  domain: 127.0.0.1
  allowInterTenant: true
  ringGroups:
    - {name: front, extensions: ["102", "101"], strategy: sequential, ringTimeout: 2s}
    - {name: all, extensions: ["102", "101"], strategy: simultaneous, ringTimeout: 10s}
`)
	doc(`kind: Tenant
metadata: {name: acme}
spec:
  domain: acme.test
  allowInterTenant: true
  callerId: {number: "+15550100", name: Acme}
  limits:
    blockedPrefixes: ["1900"]
` + c.acmeLimits)
	doc(`kind: Tenant
metadata: {name: closed}
spec:
  domain: closed.test
`)
	for i, name := range []string{"alice", "bob", "carol", "dave"} {
		doc(fmt.Sprintf("kind: Account\nmetadata: {name: %s, tenant: demo}\nspec: {password: %s-secret, extension: \"%d\"}\n", name, name, 100+i))
	}
	doc("kind: Account\nmetadata: {name: zed, tenant: acme}\nspec: {password: zed-secret, extension: \"200\"}\n")
	doc("kind: Account\nmetadata: {name: cleo, tenant: closed}\nspec: {password: cleo-secret, extension: \"300\"}\n")
	route := func(tenant, name, did, typ, target string) {
		doc(fmt.Sprintf("kind: InboundRoute\nmetadata: {name: %s, tenant: %s}\nspec: {did: \"%s\", destination: {type: %s, target: \"%s\"}}\n", name, tenant, did, typ, target))
	}
	route("demo", "main", "+15550001", "extension", "101")
	route("demo", "front", "+15550003", "ring_group", "front")
	route("demo", "all", "+15550004", "ring_group", "all")
	route("demo", "forward", "+15550005", "external", "0044207000")
	route("acme", "zed", "+15550002", "extension", "200")
	route("acme", "forward", "+15550006", "external", "9555125")
	route("closed", "cleo", "+15550300", "extension", "300")
	doc(`kind: InboundOverride
metadata: {name: acme-line-to-bob}
spec: {priority: 10, did: "+15550002", tenant: demo, destination: {type: extension, target: "101"}}
`)
	carrier := fmt.Sprintf("host: 127.0.0.2\n  port: %d\n  inbound: {matchIps: [127.0.0.2]}\n", c.carrierPort)
	if c.registrarPort != 0 {
		carrier = fmt.Sprintf("host: 127.0.0.2\n  port: %d\n  auth: {username: trunkuser, password: trunkpass}\n  registration: {enabled: true, expiry: 6s, contactUser: pbxline}\n", c.registrarPort)
	}
	doc("kind: Trunk\nmetadata: {name: carrier}\nspec:\n  " + carrier)
	doc(fmt.Sprintf("kind: Trunk\nmetadata: {name: local}\nspec:\n  host: 127.0.0.4\n  port: %d\n  tenant: demo\n", c.localPort))
	doc(fmt.Sprintf("kind: Trunk\nmetadata: {name: intl}\nspec:\n  host: 127.0.0.3\n  port: %d\n  auth: {username: intluser, password: intlpass}\n  callerId: {number: \"+15559999\"}\n", c.intlPort))
	doc(fmt.Sprintf("kind: Trunk\nmetadata: {name: fallback}\nspec:\n  host: 127.0.0.5\n  port: %d\n", c.fallbackPort))
	doc(`kind: OutboundRoute
metadata: {name: acme-local, tenant: acme}
spec: {priority: 10, pattern: "^9", strip: 1, prepend: "+1", trunk: carrier}
`)
	doc(`kind: OutboundRoute
metadata: {name: acme-to-blocked, tenant: acme}
spec: {priority: 20, pattern: "^8", strip: 1, prepend: "1900", trunk: carrier}
`)
	doc(`kind: OutboundRoute
metadata: {name: world}
spec: {priority: 10, pattern: "^00", strip: 2, prepend: "+", trunk: intl}
`)
	return b.String()
}

// startTrunkPBX starts bin/pbx on c with the management API on.
func startTrunkPBX(t *testing.T, c trunkPBX) (*pbxProc, apiClient) {
	t.Helper()
	root := t.TempDir()
	sipPort, apiPort, rtpMin := freePort(t), freePort(t), freePortRange(t, 800)
	dataDir := filepath.Join(root, "data")
	if err := os.WriteFile(filepath.Join(root, "pbx.yaml"), []byte(c.yaml(sipPort, apiPort, rtpMin, dataDir)), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.beforeStart != nil {
		c.beforeStart(dataDir)
	}
	p := &pbxProc{t: t, dir: root, dataDir: dataDir, sipPort: sipPort, apiPort: apiPort, log: &logBuffer{}, done: make(chan struct{})}
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("pbx log (last lines, debug omitted):\n%s", tail(withoutDebug(p.log.String()), 60))
		}
	})
	return p, apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
}

// recordsOf reads every committed call record of tenant.
func recordsOf(t *testing.T, dataDir, tenant string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	root := filepath.Join(dataDir, tenant, "cdr")
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") || strings.Contains(path, "inflight") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		recs = append(recs, m)
		return nil
	})
	return recs
}

// waitRecord polls until tenant has a record matching f, and returns it.
func waitRecord(t *testing.T, dataDir, tenant string, f func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, r := range recordsOf(t, dataDir, tenant) {
			if f(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(recordsOf(t, dataDir, tenant), "", " ")
			t.Fatalf("no matching call record of %s; records:\n%s", tenant, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func field(r map[string]any, k string) string {
	switch v := r[k].(type) {
	case string:
		return v
	case float64:
		return strconv.Itoa(int(v))
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// list returns the objects of a record's list field (steps, legs).
func list(r map[string]any, k string) []map[string]any {
	var out []map[string]any
	xs, _ := r[k].([]any)
	for _, x := range xs {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// expect fails the test naming every field of rec that differs from want.
func expect(t *testing.T, rec map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := field(rec, k); got != v {
			t.Errorf("record %s = %q, want %q", k, got, v)
		}
	}
	if t.Failed() {
		b, _ := json.MarshalIndent(rec, "", " ")
		t.Logf("record:\n%s", b)
	}
}

func steps(rec map[string]any) string {
	var parts []string
	for _, s := range list(rec, "steps") {
		parts = append(parts, field(s, "type")+":"+field(s, "result")+":"+field(s, "error"))
	}
	return strings.Join(parts, " | ")
}

// registerAs registers user@domain from 127.0.0.1:port with digest.
func registerAs(t *testing.T, p *pbxProc, dir, user, domain string, port int) {
	t.Helper()
	csv := fmt.Sprintf("SEQUENTIAL\n%s;%s;[authentication username=%s password=%s-secret]\n", user, domain, user, user)
	if err := os.WriteFile(filepath.Join(dir, user+".csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startSIPp(t, dir, "register-"+user, 30*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "register.xml", "-inf", user+".csv",
		"-m", "1", "-p", strconv.Itoa(port), "-i", "127.0.0.1", "-t", "u1")
	if code := r.wait(); code != 0 {
		t.Fatalf("register %s@%s: sipp exit %d\n%s", user, domain, code, r.errors(dir))
	}
}

// phone is a registered extension answering (or ringing) with SIPp.
func answerAt(t *testing.T, dir, name, ip string, port int, pbxPort int, scenario string) *sippRun {
	t.Helper()
	r := startSIPp(t, dir, name, 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", pbxPort), "-sf", scenario, "-m", "1",
		"-p", strconv.Itoa(port), "-i", ip, "-mi", ip, "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before a call reaches it
	return r
}

func mustExit0(t *testing.T, r *sippRun, dir, what string) {
	t.Helper()
	if code := r.wait(); code != 0 {
		t.Fatalf("%s: sipp exit %d\n%s", what, code, r.errors(dir))
	}
}

// carrierCall sends an INVITE for number from a carrier at ip with the given
// scenario.
func carrierCall(t *testing.T, p *pbxProc, dir, name, ip, number, scenario string) *sippRun {
	t.Helper()
	return startSIPp(t, dir, name, 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", scenario, "-s", number, "-m", "1", "-d", "1000",
		"-p", strconv.Itoa(freePort(t)), "-i", ip, "-mi", ip, "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
}

// TestTrunkRegistersWithDigest: the trunk registers to a SIPp registrar on
// 127.0.0.2 with digest and re-registers before the granted 6 s run out
// (the scenario waits at most 6 s for it); the API shows the live state,
// and a call the carrier sends to the registered Contact routes by its To.
func TestTrunkRegistersWithDigest(t *testing.T) {
	requireSIPp(t)
	dir := scenarioDir(t, nil)
	regPort, bobPort := freePort(t), freePort(t)
	reg := startSIPp(t, dir, "registrar", 40*time.Second, "-sf", "carrier_registrar.xml", "-m", "1",
		"-p", strconv.Itoa(regPort), "-i", "127.0.0.2", "-t", "u1")
	time.Sleep(300 * time.Millisecond)
	p, api := startTrunkPBX(t, trunkPBX{registrarPort: regPort, carrierPort: freePort(t), intlPort: freePort(t), localPort: freePort(t), fallbackPort: freePort(t)})
	mustExit0(t, reg, dir, "registrar")

	msgs, _ := os.ReadFile(filepath.Join(dir, "registrar.messages.log"))
	// The refresh must arrive before the granted 6 s run out. SIPp waits up to
	// 12 s for it so that a loaded machine does not fail the scenario; the
	// interval is measured from SIPp's own receive timestamps.
	if at := authorizedRegisters(t, string(msgs)); len(at) < 2 {
		t.Errorf("want two authenticated REGISTERs, got %d", len(at))
	} else if gap := at[1].Sub(at[0]); gap >= 6*time.Second {
		t.Errorf("re-registration came %s after the first, past the granted 6s", gap)
	}
	for _, want := range []string{"Contact: <sip:pbxline@127.0.0.1:" + strconv.Itoa(p.sipPort), "Expires: 6", "username=\"trunkuser\""} {
		if !strings.Contains(string(msgs), want) {
			t.Errorf("the REGISTERs lack %q", want)
		}
	}
	var trunks struct {
		Trunks []struct {
			Name         string `json:"name"`
			Registration struct {
				Enabled   bool       `json:"enabled"`
				State     string     `json:"state"`
				ExpiresAt *time.Time `json:"expires_at"`
				LastError string     `json:"last_error"`
			} `json:"registration"`
			Addresses []string `json:"addresses"`
		} `json:"trunks"`
	}
	api.getJSON("/v1/trunks", &trunks)
	found := false
	for _, tr := range trunks.Trunks {
		if tr.Name != "carrier" {
			continue
		}
		found = true
		r := tr.Registration
		if !r.Enabled || r.State != "registered" || r.ExpiresAt == nil || time.Until(*r.ExpiresAt) > 6*time.Second || r.LastError != "" {
			t.Errorf("registration in the API: %+v", r)
		}
		if len(tr.Addresses) != 1 || tr.Addresses[0] != "127.0.0.2" {
			t.Errorf("addresses %v, want the discovered 127.0.0.2", tr.Addresses)
		}
	}
	if !found {
		t.Fatalf("trunk carrier not listed: %+v", trunks)
	}

	// The carrier sends a call to the registered Contact (pbxline) with the
	// number in To: the number routes, not the contact user.
	registerAs(t, p, dir, "bob", "127.0.0.1", bobPort)
	if err := os.WriteFile(filepath.Join(dir, "did.csv"), []byte("SEQUENTIAL\n+15550001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	uas := answerAt(t, dir, "bob", "127.0.0.1", bobPort, p.sipPort, "uas_answer.xml")
	uac := startSIPp(t, dir, "carrier-call", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "carrier_call_contact.xml", "-inf", "did.csv", "-s", "pbxline",
		"-m", "1", "-d", "500", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.2", "-mi", "127.0.0.2", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	mustExit0(t, uac, dir, "carrier call")
	mustExit0(t, uas, dir, "bob")
	rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "did") == "+15550001" })
	expect(t, rec, map[string]string{"direction": "inbound", "trunk": "carrier", "cause": "answered", "answered_by": "101"})

	if code, body := api.do("POST", "/v1/trunks/carrier/refresh"); code != 202 {
		t.Errorf("refresh: %d %s", code, body)
	}
	if code, _ := api.do("POST", "/v1/trunks/nope/refresh"); code != 404 {
		t.Errorf("refresh of an unknown trunk: %d", code)
	}
}

// TestTrunkInbound: calls from carriers reach extensions by DID, an
// override takes another tenant's number, a ring group rings carol then
// bob, an unknown number on a pinned trunk is no_route, and the same INVITE
// from an address of no trunk is challenged instead of routed.
func TestTrunkInbound(t *testing.T) {
	requireSIPp(t)
	p, _ := startTrunkPBX(t, trunkPBX{carrierPort: freePort(t), intlPort: freePort(t), localPort: freePort(t), fallbackPort: freePort(t)})
	dir := scenarioDir(t, nil)
	bobPort, carolPort := freePort(t), freePort(t)
	registerAs(t, p, dir, "bob", "127.0.0.1", bobPort)

	t.Run("trusted carrier reaches a DID", func(t *testing.T) {
		uas := answerAt(t, dir, "bob-1", "127.0.0.1", bobPort, p.sipPort, "uas_answer.xml")
		uac := carrierCall(t, p, dir, "carrier-1", "127.0.0.2", "+15550001", "carrier_call.xml")
		mustExit0(t, uac, dir, "carrier")
		mustExit0(t, uas, dir, "bob")
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "did") == "+15550001" })
		expect(t, rec, map[string]string{"direction": "inbound", "trunk": "carrier", "cause": "answered", "answered_by": "101",
			"extension": "101", "from": "+15557654321", "to": "+15550001"})
		if !strings.HasPrefix(field(rec, "source"), "127.0.0.2:") {
			t.Errorf("source %q, want the carrier's address", field(rec, "source"))
		}
		if s := steps(rec); !strings.HasPrefix(s, "route:") || !strings.Contains(s, "inbound route main") || !strings.HasSuffix(s, "dial:answered:") {
			t.Errorf("steps %s", s)
		}
		if legs := list(rec, "legs"); len(legs) != 1 || field(legs[0], "target") != "101" || field(legs[0], "won") != "true" {
			t.Errorf("legs %v", legs)
		}
	})

	t.Run("override takes another tenant's number", func(t *testing.T) {
		uas := answerAt(t, dir, "bob-2", "127.0.0.1", bobPort, p.sipPort, "uas_answer.xml")
		uac := carrierCall(t, p, dir, "carrier-2", "127.0.0.2", "+15550002", "carrier_call.xml")
		mustExit0(t, uac, dir, "carrier")
		mustExit0(t, uas, dir, "bob")
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "did") == "+15550002" })
		expect(t, rec, map[string]string{"tenant": "demo", "direction": "inbound", "trunk": "carrier", "cause": "answered", "answered_by": "101"})
		if s := steps(rec); !strings.Contains(s, "override acme-line-to-bob") {
			t.Errorf("steps %s", s)
		}
		if n := len(recordsOf(t, p.dataDir, "acme")); n != 0 {
			t.Errorf("acme, whose number it is, has %d records", n)
		}
	})

	t.Run("sequential ring group", func(t *testing.T) {
		registerAs(t, p, dir, "carol", "127.0.0.1", carolPort)
		carol := answerAt(t, dir, "carol", "127.0.0.1", carolPort, p.sipPort, "uas_ring_cancel.xml")
		bob := answerAt(t, dir, "bob-3", "127.0.0.1", bobPort, p.sipPort, "uas_answer.xml")
		uac := carrierCall(t, p, dir, "carrier-3", "127.0.0.2", "+15550003", "carrier_call.xml")
		mustExit0(t, uac, dir, "carrier")
		mustExit0(t, carol, dir, "carol")
		mustExit0(t, bob, dir, "bob")
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "did") == "+15550003" })
		expect(t, rec, map[string]string{"cause": "answered", "answered_by": "101"})
		legs := list(rec, "legs")
		if len(legs) != 2 {
			t.Fatalf("legs %v", legs)
		}
		byTarget := map[string]map[string]any{}
		for _, l := range legs {
			byTarget[field(l, "target")] = l
		}
		c, b := byTarget["102"], byTarget["101"]
		if c == nil || b == nil || field(c, "won") != "false" || field(b, "won") != "true" || field(c, "answer") != "" {
			t.Fatalf("legs %v", legs)
		}
		cs, _ := time.Parse(time.RFC3339Nano, field(c, "start"))
		bs, _ := time.Parse(time.RFC3339Nano, field(b, "start"))
		if d := bs.Sub(cs); d < 1900*time.Millisecond || d > 3*time.Second {
			t.Errorf("bob's leg started %v after carol's, want her 2s ring first", d)
		}
		if s := steps(rec); !strings.HasSuffix(s, "ring_group:answered:") {
			t.Errorf("steps %s", s)
		}
	})

	t.Run("simultaneous ring group", func(t *testing.T) {
		carol := answerAt(t, dir, "carol-2", "127.0.0.1", carolPort, p.sipPort, "uas_ring_cancel.xml")
		bob := answerAt(t, dir, "bob-4", "127.0.0.1", bobPort, p.sipPort, "uas_answer.xml")
		uac := carrierCall(t, p, dir, "carrier-4", "127.0.0.2", "+15550004", "carrier_call.xml")
		mustExit0(t, uac, dir, "carrier")
		mustExit0(t, carol, dir, "carol")
		mustExit0(t, bob, dir, "bob")
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "did") == "+15550004" })
		expect(t, rec, map[string]string{"cause": "answered", "answered_by": "101"})
		byTarget := map[string]map[string]any{}
		for _, l := range list(rec, "legs") {
			byTarget[field(l, "target")] = l
		}
		c, b := byTarget["102"], byTarget["101"]
		if c == nil || b == nil || field(c, "won") != "false" || field(c, "cause") != "cancelled" || field(b, "won") != "true" {
			t.Fatalf("legs %v", list(rec, "legs"))
		}
		cs, _ := time.Parse(time.RFC3339Nano, field(c, "start"))
		bs, _ := time.Parse(time.RFC3339Nano, field(b, "start"))
		if d := bs.Sub(cs).Abs(); d > 500*time.Millisecond {
			t.Errorf("legs started %v apart, want both at once", d)
		}
	})

	t.Run("unknown number", func(t *testing.T) {
		uac := carrierCall(t, p, dir, "local-404", "127.0.0.4", "+15559876", "carrier_404.xml")
		mustExit0(t, uac, dir, "carrier")
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "to") == "+15559876" })
		expect(t, rec, map[string]string{"direction": "inbound", "trunk": "local", "cause": "no_route", "sip_status": "404", "did": "+15559876"})
	})

	t.Run("unknown number on a shared trunk", func(t *testing.T) {
		uac := carrierCall(t, p, dir, "carrier-404", "127.0.0.2", "+19990000", "carrier_404.xml")
		mustExit0(t, uac, dir, "carrier")
		p.waitLog("call of no tenant not recorded", 10*time.Second)
		for _, tn := range []string{"demo", "acme", "closed"} {
			for _, r := range recordsOf(t, p.dataDir, tn) {
				if field(r, "to") == "+19990000" {
					t.Errorf("tenant %s has the record of a number nobody claims", tn)
				}
			}
		}
	})

	t.Run("untrusted address must authenticate", func(t *testing.T) {
		uac := carrierCall(t, p, dir, "stranger", "127.0.0.9", "+15550001", "carrier_407.xml")
		mustExit0(t, uac, dir, "stranger")
		for _, r := range recordsOf(t, p.dataDir, "demo") {
			if strings.HasPrefix(field(r, "source"), "127.0.0.9:") {
				t.Errorf("the stranger's INVITE was routed: %v", r)
			}
		}
	})
}

// TestTrunkOutbound: acme's calls leave by its own route, a global route (to
// a carrier that challenges the INVITE) and the default trunk; an inbound
// route forwards a carrier's call to an external number; a blocked prefix
// is refused as dialled and after rewriting.
func TestTrunkOutbound(t *testing.T) {
	requireSIPp(t)
	cfg := trunkPBX{carrierPort: freePort(t), intlPort: freePort(t), localPort: freePort(t), fallbackPort: freePort(t)}
	p, _ := startTrunkPBX(t, cfg)
	dir := scenarioDir(t, map[string]string{"zed.csv": "SEQUENTIAL\nzed;acme.test;[authentication username=zed password=zed-secret]\n"})

	call := func(number, scenario string) {
		t.Helper()
		uac := startSIPp(t, dir, "zed-"+number, 60*time.Second,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", scenario, "-inf", "zed.csv",
			"-s", number, "-auth_uri", fmt.Sprintf("%s@127.0.0.1:%d", number, p.sipPort),
			"-m", "1", "-d", "1000", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
			"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
		mustExit0(t, uac, dir, "zed calling "+number)
	}
	for _, tc := range []struct {
		name, number, trunk, ip string
		port                    int
		sent, pai               string
		scenario                string
	}{
		{"tenant route", "9555123", "carrier", "127.0.0.2", cfg.carrierPort, "+1555123", `"Acme" <sip:+15550100@`, "uas_answer.xml"},
		// This carrier challenges the INVITE: the trunk's auth answers.
		{"global route", "0044207946", "intl", "127.0.0.3", cfg.intlPort, "+44207946", `"Acme" <sip:+15550100@`, "carrier_uas_auth.xml"},
		{"default trunk", "5551234", "fallback", "127.0.0.5", cfg.fallbackPort, "5551234", `"Acme" <sip:+15550100@`, "uas_answer.xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "carrier-" + tc.trunk
			uas := startSIPp(t, dir, name, 60*time.Second, "-sf", tc.scenario, "-m", "1",
				"-p", strconv.Itoa(tc.port), "-i", tc.ip, "-mi", tc.ip, "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
			time.Sleep(300 * time.Millisecond)
			call(tc.number, "uac_call.xml")
			mustExit0(t, uas, dir, name)
			msgs, _ := os.ReadFile(filepath.Join(dir, name+".messages.log"))
			if want := fmt.Sprintf("INVITE sip:%s@%s:%d", tc.sent, tc.ip, tc.port); !strings.Contains(string(msgs), want) {
				t.Errorf("carrier did not receive %q:\n%s", want, tail(string(msgs), 30))
			}
			if !strings.Contains(string(msgs), "P-Asserted-Identity: "+tc.pai) {
				t.Errorf("no P-Asserted-Identity %s", tc.pai)
			}
			rec := waitRecord(t, p.dataDir, "acme", func(r map[string]any) bool { return field(r, "to") == tc.number })
			expect(t, rec, map[string]string{"direction": "outbound", "trunk": tc.trunk, "cause": "answered", "extension": "200", "did": "+15550100"})
			if legs := list(rec, "legs"); len(legs) != 1 || field(legs[0], "kind") != "trunk" || field(legs[0], "target") != tc.trunk {
				t.Errorf("legs %v", legs)
			}
		})
	}
	t.Run("inbound forwarded to an external number", func(t *testing.T) {
		uas := startSIPp(t, dir, "carrier-intl-fwd", 60*time.Second, "-sf", "carrier_uas_auth.xml", "-m", "1",
			"-p", strconv.Itoa(cfg.intlPort), "-i", "127.0.0.3", "-mi", "127.0.0.3", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
		time.Sleep(300 * time.Millisecond)
		uac := carrierCall(t, p, dir, "carrier-fwd", "127.0.0.2", "+15550005", "carrier_call.xml")
		mustExit0(t, uac, dir, "carrier")
		mustExit0(t, uas, dir, "intl")
		msgs, _ := os.ReadFile(filepath.Join(dir, "carrier-intl-fwd.messages.log"))
		if !strings.Contains(string(msgs), fmt.Sprintf("INVITE sip:+44207000@127.0.0.3:%d", cfg.intlPort)) ||
			!strings.Contains(string(msgs), "From: \"Caller\" <sip:+15557654321@127.0.0.1>") {
			t.Errorf("the forwarded INVITE:\n%s", tail(string(msgs), 40))
		}
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "did") == "+15550005" })
		expect(t, rec, map[string]string{"direction": "inbound", "trunk": "carrier", "cause": "answered"})
		if legs := list(rec, "legs"); len(legs) != 1 || field(legs[0], "kind") != "trunk" || field(legs[0], "target") != "intl" {
			t.Errorf("legs %v", legs)
		}
		if s := steps(rec); !strings.Contains(s, "external:") || !strings.Contains(s, "global route world") {
			t.Errorf("steps %s", s)
		}
	})
	for _, tc := range []struct{ name, number, reason string }{
		{"blocked as dialled", "1900555", "matches blocked prefix 1900"},
		{"blocked after rewrite", "8555", "(sent as 1900555) matches blocked prefix 1900"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call(tc.number, "uac_403.xml")
			rec := waitRecord(t, p.dataDir, "acme", func(r map[string]any) bool { return field(r, "to") == tc.number })
			expect(t, rec, map[string]string{"direction": "outbound", "cause": "rejected", "sip_status": "403"})
			if !strings.Contains(field(rec, "reason"), tc.reason) {
				t.Errorf("reason %q, want it to name %q", field(rec, "reason"), tc.reason)
			}
		})
	}
}

// TestInterTenant: alice (demo) reaches zed at 200@acme.test, both tenants
// being open, and each tenant sees its side: the live call in /v1/calls and
// its own record of it (one id, two tenants) through tokens restricted to
// it; a DID of the closed tenant is refused.
func TestInterTenant(t *testing.T) {
	requireSIPp(t)
	p, api := startTrunkPBX(t, trunkPBX{carrierPort: freePort(t), intlPort: freePort(t), localPort: freePort(t), fallbackPort: freePort(t)})
	demoAPI, acmeAPI := api, api
	demoAPI.token, acmeAPI.token = demoToken, acmeToken
	dir := scenarioDir(t, map[string]string{
		"alice-acme.csv": "SEQUENTIAL\nalice;127.0.0.1;[authentication username=alice password=alice-secret];acme.test\n",
		"alice.csv":      "SEQUENTIAL\nalice;127.0.0.1;[authentication username=alice password=alice-secret]\n",
	})
	zedPort := freePort(t)
	registerAs(t, p, dir, "zed", "acme.test", zedPort)

	t.Run("allowed", func(t *testing.T) {
		uas := answerAt(t, dir, "zed", "127.0.0.1", zedPort, p.sipPort, "uas_answer.xml")
		uac := startSIPp(t, dir, "alice-to-zed", 60*time.Second,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_domain_call.xml", "-inf", "alice-acme.csv",
			"-s", "200", "-auth_uri", "200@acme.test", "-m", "1", "-d", "4000", "-p", strconv.Itoa(freePort(t)),
			"-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
		// Both tenants' tokens see the answered call, under one id.
		var live [2]callList
		waitFor(t, "the call answered in both tenants' /v1/calls", 10*time.Second, func() bool {
			for i, c := range []apiClient{demoAPI, acmeAPI} {
				live[i] = callList{}
				c.getJSON("/v1/calls", &live[i])
				if len(live[i].Calls) != 1 || live[i].Calls[0].State != "answered" {
					return false
				}
			}
			return true
		})
		d, a := live[0].Calls[0], live[1].Calls[0]
		if d.ID != a.ID || d.Tenant != "demo" || a.Tenant != "acme" || d.From != "100" || d.To != "200" {
			t.Errorf("demo sees %+v, acme sees %+v; want one call, each tenant its own, from 100", d, a)
		}
		mustExit0(t, uac, dir, "alice")
		mustExit0(t, uas, dir, "zed")
		// The callee's tenant: the extension called; the caller's: the one
		// calling. Alice has no display name: she was presented as
		// sip.contactUser (the userAgent, pbx).
		rec := waitRecord(t, p.dataDir, "acme", func(r map[string]any) bool { return field(r, "to") == "200" })
		expect(t, rec, map[string]string{"direction": "internal", "cause": "answered", "answered_by": "200", "from": "100",
			"from_name": "pbx", "tenant": "acme", "extension": "200", "id": d.ID})
		rec = waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "id") == d.ID })
		expect(t, rec, map[string]string{"direction": "internal", "cause": "answered", "answered_by": "200", "from": "100",
			"from_name": "pbx", "tenant": "demo", "extension": "100", "to": "200"})
		msgs, _ := os.ReadFile(filepath.Join(dir, "zed.messages.log"))
		if !strings.Contains(string(msgs), `From: "pbx" <sip:100@127.0.0.1>`) {
			t.Errorf("zed was not offered alice as 100 named pbx:\n%s", tail(string(msgs), 30))
		}
		for _, tc := range []struct {
			c      apiClient
			tenant string
			code   int
		}{{demoAPI, "demo", 200}, {acmeAPI, "acme", 200}, {demoAPI, "acme", 404}, {acmeAPI, "demo", 404}} {
			if code, body := tc.c.do("GET", "/v1/cdr/"+tc.tenant+"/"+d.ID); code != tc.code {
				t.Errorf("GET /v1/cdr/%s/%s with a %s token: %d %s, want %d", tc.tenant, d.ID, tc.c.token[4:8], code, body, tc.code)
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		uac := startSIPp(t, dir, "alice-to-closed", 60*time.Second,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_403.xml", "-inf", "alice.csv",
			"-s", "+15550300", "-auth_uri", fmt.Sprintf("+15550300@127.0.0.1:%d", p.sipPort), "-m", "1",
			"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-t", "u1")
		mustExit0(t, uac, dir, "alice")
		rec := waitRecord(t, p.dataDir, "demo", func(r map[string]any) bool { return field(r, "to") == "+15550300" })
		expect(t, rec, map[string]string{"direction": "internal", "cause": "rejected", "sip_status": "403"})
		if !strings.Contains(field(rec, "reason"), "to tenant closed are not allowed") {
			t.Errorf("reason %q", field(rec, "reason"))
		}
		if n := len(recordsOf(t, p.dataDir, "closed")); n != 0 {
			t.Errorf("the closed tenant has %d records", n)
		}
	})
}

// authorizedRegisters returns when SIPp received each REGISTER that carried
// credentials, from its message log ("----- YYYY-MM-DD HH:MM:SS.micro" headers).
func authorizedRegisters(t *testing.T, log string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, entry := range strings.Split(log, "-----------------------------------------------")[1:] {
		head, body, _ := strings.Cut(entry, "\n")
		if !strings.Contains(body, "message received") || !strings.Contains(body, "REGISTER sip:") || !strings.Contains(body, "Authorization:") {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05.000000", strings.TrimSpace(head), time.Local)
		if err != nil {
			t.Fatalf("message log timestamp %q: %v", head, err)
		}
		out = append(out, at)
	}
	return out
}
