package recording

import (
	"fmt"
	"strconv"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

// Modes of recording.mode.
const (
	ModeNone     = "none"
	ModeInbound  = "inbound"
	ModeOutbound = "outbound"
	ModeInternal = "internal"
	ModeAll      = "all"
)

// Levels of the policy, in the specification's order: the first that says
// anything about a call decides.
const (
	LevelInboundRoute = "inbound route"
	LevelAccount      = "account"
	LevelTenant       = "tenant"
	LevelSystem       = "system"
)

// ExtraRouteRecord is the b2bua.Meta.Extra key carrying the matched
// InboundRoute's `record` ("true" or "false"); absent when the route says
// nothing (or no InboundRoute matched).
const ExtraRouteRecord = "record.route"

// Covers reports whether recording mode covers call c, matched against
// where the call came from and went: inbound arrived on a trunk, outbound
// left on one (Meta.Egress; a carrier's call forwarded to a carrier is
// both), internal did neither.
func Covers(mode string, c *b2bua.CallInfo) bool {
	in := c.Caller.Kind == b2bua.KindTrunk
	out := c.Meta.Egress == b2bua.KindTrunk
	switch mode {
	case ModeAll:
		return true
	case ModeInbound:
		return in
	case ModeOutbound:
		return out
	case ModeInternal:
		return !in && !out
	}
	return false
}

// Decision is the policy's answer for one call.
type Decision struct {
	Record bool
	Level  string // which level decided
	Why    string // what that level said, for the call record's step
	// Refused says why a call the levels armed is not recorded after all
	// (the upload backlog past maxPending); the step's error.
	Refused string
}

// Result is the decision as the call record's `record` step shows it:
// "armed by account 200 record true", "disarmed by system mode none",
// "disarmed by maxPending".
func (d Decision) Result() string {
	if d.Refused != "" {
		return "disarmed by maxPending"
	}
	verb := "disarmed"
	if d.Record {
		verb = "armed"
	}
	return fmt.Sprintf("%s by %s %s", verb, d.Level, d.Why)
}

// Policy decides which calls are recorded, from the configuration.
type Policy struct {
	cfg      *config.Config
	accounts map[string]map[string]*config.Account // tenant -> extension -> account
	// maxPending and pending: past maxPending queued uploads, no new call
	// is recorded (storage s3 only).
	maxPending int
	pending    func() int
}

// LimitBacklog stops recording new calls while pending() reports max or
// more queued uploads (recording.maxPending; 0 means no cap).
func (p *Policy) LimitBacklog(max int, pending func() int) {
	p.maxPending, p.pending = max, pending
}

// NewPolicy builds the policy of cfg.
func NewPolicy(cfg *config.Config) *Policy {
	p := &Policy{cfg: cfg, accounts: map[string]map[string]*config.Account{}}
	for _, a := range cfg.Accounts {
		if a.Extension == "" {
			continue
		}
		if p.accounts[a.Tenant] == nil {
			p.accounts[a.Tenant] = map[string]*config.Account{}
		}
		p.accounts[a.Tenant][a.Extension] = a
	}
	return p
}

// Decide applies the four levels to answered call c: the InboundRoute's
// `record` (carried in c.Meta.Extra), the answering Account's `record`,
// the Tenant's recording block (enabled false collapses mode to none),
// then the System's. The first level that says anything wins.
func (p *Policy) Decide(c *b2bua.CallInfo) Decision {
	d := p.level(c)
	if d.Record && p.maxPending > 0 && p.pending != nil {
		if n := p.pending(); n >= p.maxPending {
			d.Record = false
			d.Refused = fmt.Sprintf("%d uploads queued, maxPending is %d", n, p.maxPending)
		}
	}
	return d
}

// level is the decision of the first level that says anything.
func (p *Policy) level(c *b2bua.CallInfo) Decision {
	if v, ok := c.Meta.Extra[ExtraRouteRecord]; ok {
		rec, _ := strconv.ParseBool(v)
		return Decision{Record: rec, Level: LevelInboundRoute, Why: "record " + strconv.FormatBool(rec)}
	}
	if a := p.accounts[c.Tenant][c.AnsweredBy]; a != nil && a.Record != nil {
		return Decision{Record: *a.Record, Level: LevelAccount, Why: fmt.Sprintf("%s record %t", a.Extension, *a.Record)}
	}
	if t := p.cfg.Tenant(c.Tenant); t != nil && t.Recording != nil {
		mode := effectiveMode(t.Recording)
		return Decision{Record: Covers(mode, c), Level: LevelTenant, Why: fmt.Sprintf("%s mode %s", t.Name, mode)}
	}
	mode := effectiveMode(&p.cfg.System.Recording)
	return Decision{Record: Covers(mode, c), Level: LevelSystem, Why: "mode " + mode}
}

func effectiveMode(r *config.Recording) string {
	if !r.Enabled {
		return ModeNone
	}
	return r.Mode
}

// Enabled reports whether recording is on somewhere in cfg: a data
// directory and at least one level that can arm a call (System or a
// Tenant enabled with a mode other than none, an Account or InboundRoute
// with record: true). The recording routes and the writer exist only then.
func Enabled(cfg *config.Config) bool {
	if cfg.DataDir() == "" {
		return false
	}
	if effectiveMode(&cfg.System.Recording) != ModeNone {
		return true
	}
	for _, t := range cfg.Tenants {
		if t.Recording != nil && effectiveMode(t.Recording) != ModeNone {
			return true
		}
	}
	for _, a := range cfg.Accounts {
		if a.Record != nil && *a.Record {
			return true
		}
	}
	for _, r := range cfg.InboundRoutes {
		if r.Record != nil && *r.Record {
			return true
		}
	}
	return false
}
