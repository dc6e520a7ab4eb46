package routing

import (
	"strings"
	"testing"

	"pbx/appliance/config"
	"pbx/sipcore/calls"
)

func meta(kind, name, tenant string) config.Meta {
	return config.Meta{Kind: kind, Name: name, Tenant: tenant}
}

func dest(typ, target string) *config.Destination {
	return &config.Destination{Type: typ, Target: target}
}

// base is two tenants sharing a carrier, a third closed to other tenants,
// trunks, routes and overrides exercised by the tests below.
func base() *config.Config {
	c := &config.Config{}
	c.System.AllowInterTenant = true
	c.System.Security.Limits.BlockedPrefixes = []string{"1900", "00882"}
	c.Tenants = []*config.Tenant{
		{Meta: meta(config.KindTenant, "acme", ""), Domain: "acme.test", AllowInterTenant: true,
			FeatureCodes: config.FeatureCodes{Voicemail: "*97", VoicemailOther: "*98"},
			CallerID:     config.CallerID{Number: "+15550100", Name: "Acme"},
			RingGroups:   []config.RingGroup{{Name: "sales", Extensions: []string{"100", "101"}, Strategy: config.StrategySequential}}},
		{Meta: meta(config.KindTenant, "beta", ""), Domain: "Beta.Test", AllowInterTenant: true,
			Limits: &config.Limits{MaxConcurrentCalls: 5}},
		{Meta: meta(config.KindTenant, "open", ""), Domain: "open.test",
			Limits: &config.Limits{BlockedPrefixes: []string{}}},
		{Meta: meta(config.KindTenant, "closed", ""), Domain: "closed.test",
			Limits: &config.Limits{BlockedPrefixes: []string{"44"}}},
	}
	c.Accounts = []*config.Account{
		{Meta: meta(config.KindAccount, "alice", "acme"), Extension: "100", CallerID: config.CallerID{Number: "+15550111", Name: "Alice"}},
		{Meta: meta(config.KindAccount, "bob", "acme"), Extension: "101"},
		{Meta: meta(config.KindAccount, "zed", "beta"), Extension: "200"},
		{Meta: meta(config.KindAccount, "cleo", "closed"), Extension: "300"},
		{Meta: meta(config.KindAccount, "olly", "open"), Extension: "400"},
	}
	ir := func(name, tenant, did string, prio int, d *config.Destination) *config.InboundRoute {
		return &config.InboundRoute{Meta: meta(config.KindInboundRoute, name, tenant), DID: did, Priority: prio, Destination: *d}
	}
	c.InboundRoutes = []*config.InboundRoute{
		ir("main", "acme", "+15550100", 10, dest("extension", "100")),
		ir("main-early", "acme", "+15550100", 5, dest("extension", "101")),
		ir("sales", "acme", "+15550101", 0, dest("ring_group", "sales")),
		ir("hang", "acme", "+15550102", 0, dest("hangup", "")),
		ir("fwd", "acme", "+15550103", 0, dest("external", "0044201234")),
		ir("vm", "acme", "+15550104", 0, dest("voicemail", "100")),
		ir("q", "acme", "+15550105", 0, dest("queue", "support")),
		ir("menu", "acme", "+15550106", 0, dest("ivr", "main")),
		ir("tie-b", "acme", "+15550107", 1, dest("extension", "101")),
		ir("tie-a", "acme", "+15550107", 1, dest("extension", "100")),
		ir("zed", "beta", "+15550200", 0, dest("extension", "200")),
		ir("cleo", "closed", "+15550300", 0, dest("extension", "300")),
		ir("closed-rest", "closed", "*", 0, dest("extension", "300")),
	}
	c.Trunks = []*config.Trunk{
		{Meta: meta(config.KindTrunk, "shared", ""), Host: "127.0.0.2", CallerID: config.CallerID{Number: "+15559999", Name: "Carrier"}},
		{Meta: meta(config.KindTrunk, "beta-only", ""), Host: "127.0.0.3", Tenant: "beta"},
		{Meta: meta(config.KindTrunk, "intl", ""), Host: "127.0.0.4"},
		{Meta: meta(config.KindTrunk, "fallback", ""), Host: "127.0.0.5"},
	}
	c.System.DefaultTrunk = "fallback"
	or := func(name, tenant string, prio int, pattern string, strip int, prepend, trunk string) *config.OutboundRoute {
		return &config.OutboundRoute{Meta: meta(config.KindOutboundRoute, name, tenant), Priority: prio, Pattern: pattern, Strip: strip, Prepend: prepend, Trunk: trunk}
	}
	c.OutboundRoutes = []*config.OutboundRoute{
		or("acme-intl", "acme", 10, "^00", 2, "+", "intl"),
		or("acme-local-late", "acme", 20, "^9", 1, "", "intl"),
		or("acme-local", "acme", 5, "^9", 1, "+1", "shared"),
		or("acme-tie-b", "acme", 7, "^7", 0, "b", "intl"),
		or("acme-tie-a", "acme", 7, "^7", 0, "a", "shared"),
		or("acme-anywhere", "acme", 30, "555", 0, "", "intl"),
		or("acme-to-blocked", "acme", 40, "^8", 1, "1900", "shared"),
		or("global-uk", "", 10, `^\+44`, 0, "", "intl"),
		or("global-us", "", 20, `^\+1\d{10}$`, 0, "", "shared"),
	}
	return c
}

func TestInboundOverrides(t *testing.T) {
	c := base()
	ov := func(name string, prio int, did, tenant string, d *config.Destination) *config.InboundOverride {
		return &config.InboundOverride{Meta: meta(config.KindInboundOverride, name, ""), Priority: prio, DID: did, Tenant: tenant, Destination: d}
	}
	c.InboundOverrides = []*config.InboundOverride{
		// Priority decides before the name; the later priority loses.
		ov("z-first", 1, "+15550200", "acme", dest("extension", "101")),
		ov("a-second", 2, "+15550200", "acme", dest("extension", "100")),
		// Same priority: the name decides.
		ov("tie-b", 3, "+15550201", "acme", dest("extension", "101")),
		ov("tie-a", 3, "+15550201", "acme", dest("ring_group", "sales")),
		// No destination: only the tenant changes; acme has no route for
		// beta's number, closed has a catch-all route.
		ov("to-acme", 0, "+15550300", "acme", nil),
		ov("to-closed", 0, "+15550999", "closed", nil),
		// A catch-all with the lowest priority still comes after numbers.
		ov("catch", -100, "*", "beta", dest("extension", "200")),
	}
	for _, typ := range []string{"queue", "ivr", "voicemail", "external", "hangup"} {
		c.InboundOverrides = append(c.InboundOverrides, ov("bad-"+typ, 0, "+1666"+typ, "acme", dest(typ, "100")))
	}
	tb := New(c)
	tests := []struct {
		name    string
		trunk   string
		numbers []string
		kind    Kind
		tenant  string
		target  string
		status  int
		reason  string
	}{
		{"priority before name", "shared", []string{"+15550200"}, KindExtension, "acme", "101", 0, ""},
		{"tie broken by name", "shared", []string{"+15550201"}, KindRingGroup, "acme", "sales", 0, ""},
		{"override beats a pinned trunk", "beta-only", []string{"+15550201"}, KindRingGroup, "acme", "sales", 0, ""},
		{"no destination: tenant without route", "shared", []string{"+15550300"}, KindReject, "acme", "", 404, "tenant acme has no inbound route"},
		{"no destination: tenant's own routes decide", "shared", []string{"+15550999"}, KindExtension, "closed", "300", 0, ""},
		{"catch-all for an unclaimed number", "shared", []string{"+19999999"}, KindExtension, "beta", "200", 0, ""},
		{"catch-all also over a claimed number", "shared", []string{"+15550100"}, KindExtension, "beta", "200", 0, ""},
	}
	for _, typ := range []string{"queue", "ivr", "voicemail", "external", "hangup"} {
		tests = append(tests, struct {
			name    string
			trunk   string
			numbers []string
			kind    Kind
			tenant  string
			target  string
			status  int
			reason  string
		}{"undelivered type " + typ, "shared", []string{"+1666" + typ}, KindReject, "acme", "", 404, "invalid destination type " + typ})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tb.Inbound(InboundCall{Trunk: tt.trunk, Numbers: tt.numbers})
			check(t, r, tt.kind, tt.tenant, tt.target, tt.status, tt.reason)
			if r.Direction != calls.DirectionInbound {
				t.Errorf("direction %q", r.Direction)
			}
		})
	}
}

func check(t *testing.T, r Result, kind Kind, tenant, target string, status int, reason string) {
	t.Helper()
	if r.Kind != kind {
		t.Fatalf("kind %q, want %q (%+v)", r.Kind, kind, r)
	}
	if r.Tenant != tenant {
		t.Errorf("tenant %q, want %q", r.Tenant, tenant)
	}
	switch kind {
	case KindExtension, KindVoicemail, KindVoicemailCheck:
		if r.Extension != target {
			t.Errorf("extension %q, want %q", r.Extension, target)
		}
	case KindRingGroup:
		if r.RingGroup == nil || r.RingGroup.Name != target {
			t.Errorf("ring group %+v, want %q", r.RingGroup, target)
		}
	case KindTrunk:
		if r.Trunk == nil || r.Trunk.Name+" "+r.Number != target {
			t.Errorf("trunk/number %v %q, want %q", r.Trunk, r.Number, target)
		}
	case KindReject:
		if r.Status != status {
			t.Errorf("status %d, want %d", r.Status, status)
		}
		if !strings.Contains(r.Reason, reason) {
			t.Errorf("reason %q, want it to contain %q", r.Reason, reason)
		}
		if len(r.Steps) == 0 || r.Steps[len(r.Steps)-1].Error != r.Reason {
			t.Errorf("last step does not carry the reason: %+v", r.Steps)
		}
	}
}

func TestInboundRoutes(t *testing.T) {
	tb := New(base())
	tests := []struct {
		name    string
		trunk   string
		numbers []string
		kind    Kind
		tenant  string
		target  string
		status  int
		reason  string
		did     string
	}{
		{"lowest priority of a did wins", "shared", []string{"+15550100"}, KindExtension, "acme", "101", 0, "", "+15550100"},
		{"priority tie broken by name", "shared", []string{"+15550107"}, KindExtension, "acme", "100", 0, "", "+15550107"},
		{"ring group", "shared", []string{"+15550101"}, KindRingGroup, "acme", "sales", 0, "", "+15550101"},
		{"hangup", "shared", []string{"+15550102"}, KindReject, "acme", "", 603, "hangup", "+15550102"},
		{"external leaves on the tenant's route", "shared", []string{"+15550103"}, KindTrunk, "acme", "intl +44201234", 0, "", "+15550103"},
		{"voicemail", "shared", []string{"+15550104"}, KindVoicemail, "acme", "100", 0, "", "+15550104"},
		{"queue", "shared", []string{"+15550105"}, KindReject, "acme", "", 404, "queue", "+15550105"},
		{"ivr", "shared", []string{"+15550106"}, KindReject, "acme", "", 404, "ivr", "+15550106"},
		{"shared trunk: the number decides", "shared", []string{"+15550200"}, KindExtension, "beta", "200", 0, "", "+15550200"},
		{"pinned trunk: its tenant decides", "beta-only", []string{"+15550100"}, KindReject, "beta", "", 404, "tenant beta has no inbound route", "+15550100"},
		{"pinned trunk: own number", "beta-only", []string{"+15550200"}, KindExtension, "beta", "200", 0, "", "+15550200"},
		{"plus added", "shared", []string{"15550200"}, KindExtension, "beta", "200", 0, "", "+15550200"},
		{"request-uri user first, then to", "shared", []string{"trunkuser", "+15550200"}, KindExtension, "beta", "200", 0, "", "+15550200"},
		{"unknown number", "shared", []string{"+10000000"}, KindReject, "", "", 404, "no tenant routes number", "+10000000"},
		{"tenant catch-all route", "shared", []string{"+15550300"}, KindExtension, "closed", "300", 0, "", "+15550300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tb.Inbound(InboundCall{Trunk: tt.trunk, Numbers: tt.numbers})
			check(t, r, tt.kind, tt.tenant, tt.target, tt.status, tt.reason)
			if r.DID != tt.did {
				t.Errorf("did %q, want %q", r.DID, tt.did)
			}
			if r.Direction != calls.DirectionInbound {
				t.Errorf("direction %q", r.Direction)
			}
			if r.Kind == KindReject && r.Cause == "" {
				t.Error("reject without cause")
			}
		})
	}
}

func TestOutbound(t *testing.T) {
	tb := New(base())
	tests := []struct {
		name   string
		tenant string
		user   string
		number string
		kind   Kind
		target string
		status int
		reason string
		cid    string
		steps  string
	}{
		{"tenant route by priority, strip before prepend", "acme", "bob", "9555123", KindTrunk, "shared +1555123", 0, "", "+15550100", "tenant route acme-local"},
		{"tenant tie broken by name", "acme", "bob", "7123", KindTrunk, "shared a7123", 0, "", "+15550100", "acme-tie-a"},
		{"strip then prepend", "acme", "alice", "0044207", KindTrunk, "intl +44207", 0, "", "+15550111", "acme-intl"},
		{"not anchored", "acme", "bob", "+3155512", KindTrunk, "intl +3155512", 0, "", "+15550100", "acme-anywhere"},
		{"global after the tenant's", "beta", "zed", "+442071234", KindTrunk, "intl +442071234", 0, "", "", "global route global-uk"},
		{"global in priority order", "beta", "zed", "+12125550199", KindTrunk, "shared +12125550199", 0, "", "+15559999", "global-us"},
		{"default trunk, number unchanged", "beta", "zed", "12345", KindTrunk, "fallback 12345", 0, "", "", "default trunk"},
		{"blocked as dialled", "acme", "bob", "1900123", KindReject, "", 403, "blocked prefix 1900", "", ""},
		{"blocked after rewrite", "acme", "bob", "8123", KindReject, "", 403, "sent as 1900123) matches blocked prefix 1900", "", ""},
		{"blocked even without route", "beta", "zed", "00882123", KindReject, "", 403, "blocked prefix 00882", "", ""},
		{"tenant limits replace the system's", "closed", "cleo", "1900123", KindTrunk, "fallback 1900123", 0, "", "", "default trunk"},
		{"tenant's own blocked prefix", "closed", "cleo", "44123", KindReject, "", 403, "blocked prefix 44", "", ""},
		{"tenant limits without prefixes keep the system's", "beta", "zed", "1900123", KindReject, "", 403, "blocked prefix 1900", "", ""},
		{"tenant's empty list clears the system's", "open", "olly", "1900123", KindTrunk, "fallback 1900123", 0, "", "", "default trunk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tb.Outbound(tt.tenant, tt.user, tt.number)
			check(t, r, tt.kind, tt.tenant, tt.target, tt.status, tt.reason)
			if r.Direction != calls.DirectionOutbound {
				t.Errorf("direction %q", r.Direction)
			}
			if r.Kind == KindTrunk {
				if r.CallerID.Number != tt.cid {
					t.Errorf("caller id %q, want %q", r.CallerID.Number, tt.cid)
				}
				if len(r.Steps) == 0 || !strings.Contains(r.Steps[0].Result, tt.steps) {
					t.Errorf("steps %+v, want %q", r.Steps, tt.steps)
				}
			}
			if r.Kind == KindReject && r.Cause != calls.CauseRejected {
				t.Errorf("cause %q", r.Cause)
			}
		})
	}
	t.Run("no route without default trunk", func(t *testing.T) {
		c := base()
		c.System.DefaultTrunk = ""
		r := New(c).Outbound("beta", "zed", "12345")
		check(t, r, KindReject, "beta", "", 404, "no outbound route for 12345")
		if r.Cause != calls.CauseNoRoute {
			t.Errorf("cause %q", r.Cause)
		}
	})
}

func TestFromAccount(t *testing.T) {
	tests := []struct {
		name       string
		sysAllow   bool
		tenant     string
		user, host string
		kind       Kind
		rtenant    string
		target     string
		status     int
		reason     string
		direction  calls.Direction
	}{
		{"own extension", true, "acme", "101", "acme.test", KindExtension, "acme", "101", 0, "", calls.DirectionInternal},
		{"own extension, host is an address", true, "acme", "101", "127.0.0.1", KindExtension, "acme", "101", 0, "", calls.DirectionInternal},
		{"own ring group", true, "acme", "sales", "", KindRingGroup, "acme", "sales", 0, "", calls.DirectionInternal},
		{"own did", true, "acme", "+15550101", "", KindRingGroup, "acme", "sales", 0, "", calls.DirectionInternal},
		{"extension@domain of another tenant", true, "acme", "200", "beta.test", KindExtension, "beta", "200", 0, "", calls.DirectionInternal},
		{"did of another tenant", true, "acme", "+15550200", "acme.test", KindExtension, "beta", "200", 0, "", calls.DirectionInternal},
		{"did of another tenant without plus", true, "acme", "15550200", "acme.test", KindExtension, "beta", "200", 0, "", calls.DirectionInternal},
		{"callee tenant closed", true, "acme", "300", "closed.test", KindReject, "acme", "", 403, "to tenant closed are not allowed", calls.DirectionInternal},
		{"caller tenant closed", true, "closed", "200", "beta.test", KindReject, "closed", "", 403, "from tenant closed to tenant beta", calls.DirectionInternal},
		{"closed tenant's did", true, "acme", "+15550300", "", KindReject, "acme", "", 403, "not allowed", calls.DirectionInternal},
		{"system ceiling off", false, "acme", "200", "beta.test", KindReject, "acme", "", 403, "not allowed", calls.DirectionInternal},
		{"system ceiling off, did", false, "acme", "+15550200", "", KindReject, "acme", "", 403, "not allowed", calls.DirectionInternal},
		{"unknown in other tenant", true, "acme", "999", "beta.test", KindReject, "acme", "", 404, "tenant beta has no extension", calls.DirectionInternal},
		{"anything else is outbound", true, "acme", "0044207", "acme.test", KindTrunk, "acme", "intl +44207", 0, "", calls.DirectionOutbound},
		{"unknown tenant", true, "nobody", "100", "", KindReject, "nobody", "", 403, "unknown tenant", calls.DirectionInternal},
		{"own mailbox code", true, "acme", "*97", "acme.test", KindVoicemailCheck, "acme", "100", 0, "", calls.DirectionInternal},
		{"other mailbox code asks", true, "acme", "*98", "", KindVoicemailCheck, "acme", "", 0, "", calls.DirectionInternal},
		{"a tenant's code is its own", true, "beta", "*97", "", KindTrunk, "beta", "fallback *97", 0, "", calls.DirectionOutbound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			c.System.AllowInterTenant = tt.sysAllow
			r := New(c).FromAccount(tt.tenant, "alice", tt.user, tt.host)
			check(t, r, tt.kind, tt.rtenant, tt.target, tt.status, tt.reason)
			if r.Direction != tt.direction {
				t.Errorf("direction %q, want %q", r.Direction, tt.direction)
			}
		})
	}
}

func TestLiteralPrefix(t *testing.T) {
	tests := []struct {
		pattern  string
		anchored bool
		lit      string
	}{
		{"^1900", true, "1900"},
		{`^\+44(\d+)$`, true, "+44"},
		{"00", false, "00"},
		{"^(00|011)", true, ""},
		{"^9?1[2-9]", true, ""},
		{"(?i)^abc", true, ""},
		{"^1900|^00", false, ""},
		{".*", false, ""},
	}
	for _, tt := range tests {
		a, l := literalPrefix(tt.pattern)
		if a != tt.anchored || l != tt.lit {
			t.Errorf("%q: got %v %q, want %v %q", tt.pattern, a, l, tt.anchored, tt.lit)
		}
	}
}

// TestRouteSetAgreesWithLinearScan checks the prefiltered match against
// trying every pattern in order.
func TestRouteSetAgreesWithLinearScan(t *testing.T) {
	patterns := []string{"^00", "^0", "44", "^\\+44", "^(00|011)", "^9?1[2-9]", "^1900|^00", "5$", "^\\+1\\d{3}", "^0044", "^\\+", ".*9"}
	var rs []*config.OutboundRoute
	for i, p := range patterns {
		rs = append(rs, &config.OutboundRoute{Meta: meta(config.KindOutboundRoute, string(rune('a'+i)), ""), Priority: (i * 7) % 5, Pattern: p, Trunk: "t"})
	}
	set := newRouteSet(rs)
	numbers := []string{"0044123", "00123", "011", "+4420", "91234", "1900", "12345", "+1212555", "9", "", "44", "0", "x5", "+33"}
	for _, n := range numbers {
		got, ok := set.match(n)
		var want *outRoute
		for i := range set.routes {
			if set.routes[i].re.MatchString(n) {
				want = &set.routes[i]
				break
			}
		}
		if (want == nil) != !ok || (ok && got.cfg != want.cfg) {
			t.Errorf("%q: got %v, want %v", n, got, want)
		}
	}
}
