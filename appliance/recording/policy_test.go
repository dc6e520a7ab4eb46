package recording

import (
	"strings"
	"testing"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

var (
	phone   = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Extension: "100"}
	carrier = b2bua.Caller{Kind: b2bua.KindTrunk, Trunk: "carrier"}
	egress  = b2bua.Meta{Egress: b2bua.KindTrunk}
)

// calls of every direction, answered by extension 200 of acme (the
// outbound one by the carrier).
func callsByDirection() map[string]b2bua.CallInfo {
	return map[string]b2bua.CallInfo{
		"internal":  {Tenant: "acme", Caller: phone, AnsweredBy: "200"},
		"outbound":  {Tenant: "acme", Caller: phone, Meta: egress},
		"inbound":   {Tenant: "acme", Caller: carrier, AnsweredBy: "200"},
		"forwarded": {Tenant: "acme", Caller: carrier, Meta: egress},
	}
}

func TestCoversMatchesWhereTheCallWent(t *testing.T) {
	want := map[string]map[string]bool{
		"internal":  {"internal": true, "all": true},
		"outbound":  {"outbound": true, "all": true},
		"inbound":   {"inbound": true, "all": true},
		"forwarded": {"inbound": true, "outbound": true, "all": true},
	}
	for name, c := range callsByDirection() {
		for _, mode := range []string{"none", "inbound", "outbound", "internal", "all", "bogus"} {
			if got := Covers(mode, &c); got != want[name][mode] {
				t.Errorf("%s call, mode %s: covered %t", name, mode, got)
			}
		}
	}
}

func ptr(b bool) *bool { return &b }

// cfgWith is a configuration with tenant acme, its account for extension
// 200, and the given recording levels (nil: the level says nothing).
func cfgWith(system *config.Recording, tenant *config.Recording, account *bool) *config.Config {
	cfg := &config.Config{Root: "/etc/pbx"}
	cfg.System.DataDir = "/var/lib/pbx"
	cfg.System.Recording = config.Recording{Mode: "none", Storage: "local"}
	if system != nil {
		cfg.System.Recording = *system
	}
	cfg.Tenants = []*config.Tenant{{Meta: config.Meta{Name: "acme"}, Recording: tenant}, {Meta: config.Meta{Name: "globex"}}}
	cfg.Accounts = []*config.Account{
		{Meta: config.Meta{Name: "bob", Tenant: "acme"}, Extension: "200", Record: account},
		{Meta: config.Meta{Name: "eve", Tenant: "globex"}, Extension: "200", Record: ptr(true)},
	}
	return cfg
}

func TestPolicyLevels(t *testing.T) {
	on := func(mode string) *config.Recording { return &config.Recording{Enabled: true, Mode: mode} }
	off := func(mode string) *config.Recording { return &config.Recording{Enabled: false, Mode: mode} }
	for _, tc := range []struct {
		name    string
		system  *config.Recording
		tenant  *config.Recording
		account *bool
		route   string // "", "true", "false"
		call    string
		record  bool
		level   string
	}{
		{"nothing configured", nil, nil, nil, "", "inbound", false, LevelSystem},
		{"system all", on("all"), nil, nil, "", "internal", true, LevelSystem},
		{"system inbound, an inbound call", on("inbound"), nil, nil, "", "inbound", true, LevelSystem},
		{"system inbound, an outbound call", on("inbound"), nil, nil, "", "outbound", false, LevelSystem},
		{"system outbound, a forwarded call", on("outbound"), nil, nil, "", "forwarded", true, LevelSystem},
		{"system internal, an internal call", on("internal"), nil, nil, "", "internal", true, LevelSystem},
		{"system disabled collapses mode", off("all"), nil, nil, "", "internal", false, LevelSystem},
		{"tenant block wins over system", on("all"), on("inbound"), nil, "", "internal", false, LevelTenant},
		{"tenant disabled wins over system all", on("all"), off("all"), nil, "", "inbound", false, LevelTenant},
		{"tenant arms what system does not", nil, on("internal"), nil, "", "internal", true, LevelTenant},
		{"account wins over tenant", nil, on("all"), ptr(false), "", "internal", false, LevelAccount},
		{"account arms", nil, nil, ptr(true), "", "inbound", true, LevelAccount},
		{"route wins over account", nil, nil, ptr(true), "false", "inbound", false, LevelInboundRoute},
		{"route arms over everything", off("all"), off("all"), ptr(false), "true", "inbound", true, LevelInboundRoute},
		{"account of the answering leg only: an outbound call", nil, nil, ptr(true), "", "outbound", false, LevelSystem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy(cfgWith(tc.system, tc.tenant, tc.account))
			c := callsByDirection()[tc.call]
			if tc.route != "" {
				c.Meta.Extra = map[string]string{ExtraRouteRecord: tc.route}
			}
			d := p.Decide(&c)
			if d.Record != tc.record || d.Level != tc.level {
				t.Errorf("decision %+v, want record %t by %s", d, tc.record, tc.level)
			}
			verb := "disarmed by "
			if tc.record {
				verb = "armed by "
			}
			if !strings.HasPrefix(d.Result(), verb+tc.level) {
				t.Errorf("step result %q", d.Result())
			}
		})
	}
}

func TestPolicyAccountIsTheAnsweringTenants(t *testing.T) {
	// globex's extension 200 records; acme's says nothing: acme's call
	// answered by acme's 200 falls through to the system.
	p := NewPolicy(cfgWith(nil, nil, nil))
	c := callsByDirection()["internal"]
	if d := p.Decide(&c); d.Record || d.Level != LevelSystem {
		t.Errorf("acme call decided by another tenant's account: %+v", d)
	}
	c.Tenant = "globex"
	if d := p.Decide(&c); !d.Record || d.Level != LevelAccount {
		t.Errorf("globex call: %+v", d)
	}
}

func TestEnabledSomewhere(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want bool
	}{
		{"nothing", cfgWith(nil, nil, nil), false},
		{"system mode without enabled", cfgWith(&config.Recording{Mode: "all"}, nil, nil), false},
		{"system", cfgWith(&config.Recording{Enabled: true, Mode: "all"}, nil, nil), true},
		{"system enabled mode none", cfgWith(&config.Recording{Enabled: true, Mode: "none"}, nil, nil), false},
		{"tenant", cfgWith(nil, &config.Recording{Enabled: true, Mode: "inbound"}, nil), true},
		{"account record false", cfgWith(nil, nil, ptr(false)), false},
	} {
		// globex's account always records: drop it except where the case is about accounts.
		tc.cfg.Accounts = tc.cfg.Accounts[:1]
		if got := Enabled(tc.cfg); got != tc.want {
			t.Errorf("%s: enabled %t", tc.name, got)
		}
	}
	cfg := cfgWith(nil, nil, ptr(true))
	if !Enabled(cfg) {
		t.Error("an account with record: true: not enabled")
	}
	cfg.System.DataDir = ""
	if Enabled(cfg) {
		t.Error("enabled without a data directory")
	}
	cfg = cfgWith(nil, nil, nil)
	cfg.Accounts = nil
	cfg.InboundRoutes = []*config.InboundRoute{{Meta: config.Meta{Name: "main", Tenant: "acme"}, Record: ptr(true)}}
	if !Enabled(cfg) {
		t.Error("an inbound route with record: true: not enabled")
	}
}

func TestPolicyMaxPendingRefusesPastTheBacklog(t *testing.T) {
	p := NewPolicy(cfgWith(&config.Recording{Enabled: true, Mode: "all"}, nil, nil))
	queued := 4
	p.LimitBacklog(5, func() int { return queued })
	c := callsByDirection()["internal"]
	if d := p.Decide(&c); !d.Record || d.Refused != "" {
		t.Errorf("under the cap: %+v", d)
	}
	queued = 5
	d := p.Decide(&c)
	if d.Record || d.Refused != "5 uploads queued, maxPending is 5" || d.Result() != "disarmed by maxPending" {
		t.Errorf("at the cap: %+v %q", d, d.Result())
	}
	// A call no level arms is not refused: nothing to say.
	p = NewPolicy(cfgWith(nil, nil, nil))
	p.LimitBacklog(5, func() int { return 9 })
	if d := p.Decide(&c); d.Record || d.Refused != "" {
		t.Errorf("disarmed call: %+v", d)
	}
}
