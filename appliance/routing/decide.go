package routing

import (
	"fmt"
	"strings"

	"pbx/appliance/config"
	"pbx/sipcore/calls"
)

// SIP statuses routing answers with.
const (
	statusForbidden = 403
	statusNotFound  = 404
	statusDecline   = 603
)

// InboundCall is a call that arrived on a trunk.
type InboundCall struct {
	Trunk string // trunk name
	// Numbers are the dialled number candidates, best first: the
	// Request-URI user, then the To user.
	Numbers []string
}

// candidates expands numbers with their leading + toggled, without
// duplicates, keeping order.
func candidates(numbers []string) []string {
	out := make([]string, 0, 2*len(numbers))
	add := func(s string) {
		if s == "" || s == "+" {
			return
		}
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	for _, n := range numbers {
		add(n)
		if strings.HasPrefix(n, "+") {
			add(n[1:])
		} else {
			add("+" + n)
		}
	}
	return out
}

// Inbound routes a call that arrived on trunk c.Trunk.
func (t *Table) Inbound(c InboundCall) Result {
	res := Result{Direction: calls.DirectionInbound}
	nums := candidates(c.Numbers)
	if len(nums) > 0 {
		res.DID = nums[0]
	}
	// 1. Overrides: numbered ones, then catch-alls.
	var ov *config.InboundOverride
	for _, n := range nums {
		if os := t.overrides[n]; len(os) > 0 {
			ov, res.DID = os[0], n
			break
		}
	}
	if ov == nil && len(t.catchAll) > 0 {
		ov = t.catchAll[0]
	}
	if ov != nil {
		ti := t.tenants[ov.Tenant]
		if ti == nil {
			res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("override %s names unknown tenant %q", ov.Name, ov.Tenant))
			return res
		}
		res.Tenant, res.Domain = ti.name, ti.domain
		if d := ov.Destination; d != nil {
			res.step(StepRoute, fmt.Sprintf("override %s: %s %s of tenant %s", ov.Name, d.Type, d.Target, ti.name))
			switch d.Type {
			case config.DestExtension:
				t.deliverExtension(&res, ti, d.Target)
			case config.DestRingGroup:
				t.deliverRingGroup(&res, ti, d.Target)
			default:
				res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("override %s: invalid destination type %s (an override delivers only extension and ring_group)", ov.Name, d.Type))
			}
			return res
		}
		res.step(StepRoute, fmt.Sprintf("override %s: tenant %s", ov.Name, ti.name))
		t.tenantRoutes(&res, ti, nums)
		return res
	}
	// 2. The trunk's tenant, or the tenant claiming the number.
	if tr := t.trunks[c.Trunk]; tr != nil && tr.Tenant != "" {
		ti := t.tenants[tr.Tenant]
		if ti == nil {
			res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("trunk %s is pinned to unknown tenant %q", tr.Name, tr.Tenant))
			return res
		}
		res.Tenant, res.Domain = ti.name, ti.domain
		t.tenantRoutes(&res, ti, nums)
		return res
	}
	for _, n := range nums {
		if ti := t.didOwner[n]; ti != nil {
			res.Tenant, res.Domain = ti.name, ti.domain
			t.tenantRoutes(&res, ti, nums)
			return res
		}
	}
	res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("no tenant routes number %q", res.DID))
	return res
}

// tenantRoutes applies ti's InboundRoutes for the first candidate number
// it has a route for, else its `*` route.
func (t *Table) tenantRoutes(res *Result, ti *tenantInfo, nums []string) {
	var route *config.InboundRoute
	for _, n := range nums {
		if rs := ti.routes[n]; len(rs) > 0 {
			route, res.DID = rs[0], n
			break
		}
	}
	if route == nil {
		if rs := ti.routes["*"]; len(rs) > 0 {
			route = rs[0]
		}
	}
	if route == nil {
		res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("tenant %s has no inbound route for %q", ti.name, res.DID))
		return
	}
	d := route.Destination
	res.Record = route.Record
	res.MOHClass = route.MOHClass
	res.step(StepRoute, fmt.Sprintf("inbound route %s: %s %s", route.Name, d.Type, d.Target))
	t.deliver(res, ti, d)
}

// deliver runs an InboundRoute destination of tenant ti.
func (t *Table) deliver(res *Result, ti *tenantInfo, d config.Destination) {
	switch d.Type {
	case config.DestExtension:
		t.deliverExtension(res, ti, d.Target)
	case config.DestRingGroup:
		t.deliverRingGroup(res, ti, d.Target)
	case config.DestHangup:
		res.reject(statusDecline, calls.CauseRejected, StepHangup, "hangup destination")
	case config.DestExternal:
		dir := res.Direction
		out := t.outbound(ti, nil, d.Target)
		// The call stays the tenant's; it leaves on a trunk toward the
		// external number with the caller's own identity.
		res.Kind, res.Trunk, res.Number = out.Kind, out.Trunk, out.Number
		res.Status, res.Cause, res.Reason = out.Status, out.Cause, out.Reason
		for _, s := range out.Steps {
			if s.Type == StepRoute {
				s.Type = StepExternal
			}
			res.Steps = append(res.Steps, s)
		}
		res.Direction = dir
	case config.DestVoicemail:
		res.Kind, res.Extension = KindVoicemail, d.Target
		res.Tenant, res.Domain = ti.name, ti.domain
		res.step(StepVoicemail, "")
	default: // queue, ivr
		res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("destination type %s is not available", d.Type))
	}
}

func (t *Table) deliverExtension(res *Result, ti *tenantInfo, ext string) {
	if _, ok := ti.extensions[ext]; !ok {
		res.reject(statusNotFound, calls.CauseNoRoute, StepDial, fmt.Sprintf("tenant %s has no extension %q", ti.name, ext))
		return
	}
	res.Kind, res.Extension = KindExtension, ext
	res.Tenant, res.Domain = ti.name, ti.domain
	res.step(StepDial, "")
}

func (t *Table) deliverRingGroup(res *Result, ti *tenantInfo, name string) {
	g, ok := ti.ringGroups[name]
	if !ok {
		res.reject(statusNotFound, calls.CauseNoRoute, StepRingGroup, fmt.Sprintf("tenant %s has no ring group %q", ti.name, name))
		return
	}
	res.Kind, res.RingGroup = KindRingGroup, g
	res.Tenant, res.Domain = ti.name, ti.domain
	res.step(StepRingGroup, "")
}

// FromAccount routes a call placed by account username of tenant to
// user@host (the Request-URI).
func (t *Table) FromAccount(tenant, username, user, host string) Result {
	res := Result{Direction: calls.DirectionInternal, Tenant: tenant}
	ti := t.tenants[tenant]
	if ti == nil {
		res.reject(statusForbidden, calls.CauseRejected, StepRoute, fmt.Sprintf("caller of unknown tenant %q", tenant))
		return res
	}
	res.Domain = ti.domain
	if host != "" {
		if other := t.byDomain[strings.ToLower(host)]; other != nil && other != ti {
			res.step(StepRoute, fmt.Sprintf("tenant %s: %s", other.name, user))
			if !ti.interTenant || !other.interTenant {
				res.reject(statusForbidden, calls.CauseRejected, StepRoute, fmt.Sprintf("calls from tenant %s to tenant %s are not allowed", ti.name, other.name))
				return res
			}
			t.inside(&res, other, user)
			return res
		}
	}
	if user != "" && (user == ti.features.Voicemail || user == ti.features.VoicemailOther) {
		// A feature code never leaves for a carrier.
		res.Kind = KindVoicemailCheck
		if a := ti.accounts[username]; a != nil && user == ti.features.Voicemail {
			res.Extension = a.Extension
		}
		res.step(StepVoicemailCheck, "")
		return res
	}
	if _, ok := ti.extensions[user]; ok {
		t.deliverExtension(&res, ti, user)
		return res
	}
	if _, ok := ti.ringGroups[user]; ok {
		t.deliverRingGroup(&res, ti, user)
		return res
	}
	for _, n := range candidates([]string{user}) {
		owner := t.didOwner[n]
		if owner == nil {
			continue
		}
		res.DID = n
		if owner != ti {
			res.step(StepRoute, fmt.Sprintf("tenant %s: did %s", owner.name, n))
			if !ti.interTenant || !owner.interTenant {
				res.reject(statusForbidden, calls.CauseRejected, StepRoute, fmt.Sprintf("calls from tenant %s to tenant %s are not allowed", ti.name, owner.name))
				return res
			}
		}
		t.tenantRoutes(&res, owner, []string{n})
		return res
	}
	return t.outbound(ti, ti.accounts[username], user)
}

// inside routes user within tenant ti (an inter-tenant call): an
// extension, a ring group or a DID of ti.
func (t *Table) inside(res *Result, ti *tenantInfo, user string) {
	if _, ok := ti.extensions[user]; ok {
		t.deliverExtension(res, ti, user)
		return
	}
	if _, ok := ti.ringGroups[user]; ok {
		t.deliverRingGroup(res, ti, user)
		return
	}
	for _, n := range candidates([]string{user}) {
		if len(ti.routes[n]) > 0 {
			res.DID = n
			t.tenantRoutes(res, ti, []string{n})
			return
		}
	}
	res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("tenant %s has no extension, ring group or number %q", ti.name, user))
}

// Outbound routes number for account username of tenant to a trunk.
func (t *Table) Outbound(tenant, username, number string) Result {
	ti := t.tenants[tenant]
	if ti == nil {
		res := Result{Direction: calls.DirectionOutbound, Tenant: tenant}
		res.reject(statusForbidden, calls.CauseRejected, StepRoute, fmt.Sprintf("caller of unknown tenant %q", tenant))
		return res
	}
	return t.outbound(ti, ti.accounts[username], number)
}

func (t *Table) outbound(ti *tenantInfo, acct *config.Account, number string) Result {
	res := Result{Direction: calls.DirectionOutbound, Tenant: ti.name, Domain: ti.domain}
	if p, ok := blockedBy(ti.blocked, number); ok {
		res.reject(statusForbidden, calls.CauseRejected, StepRoute, fmt.Sprintf("number %s matches blocked prefix %s", number, p))
		return res
	}
	var trunkName, out, how string
	if r, ok := ti.outbound.match(number); ok {
		trunkName, out, how = r.cfg.Trunk, rewrite(r.cfg, number), "tenant route "+r.cfg.Name
	} else if r, ok := t.global.match(number); ok {
		trunkName, out, how = r.cfg.Trunk, rewrite(r.cfg, number), "global route "+r.cfg.Name
	} else if t.defaultTrunk != "" {
		trunkName, out, how = t.defaultTrunk, number, "default trunk"
	} else {
		res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("no outbound route for %s", number))
		return res
	}
	tr := t.trunks[trunkName]
	if tr == nil {
		res.reject(statusNotFound, calls.CauseNoRoute, StepRoute, fmt.Sprintf("%s names unknown trunk %q", how, trunkName))
		return res
	}
	if out != number {
		if p, ok := blockedBy(ti.blocked, out); ok {
			res.reject(statusForbidden, calls.CauseRejected, StepRoute, fmt.Sprintf("number %s (sent as %s) matches blocked prefix %s", number, out, p))
			return res
		}
	}
	res.Kind, res.Trunk, res.Number = KindTrunk, tr, out
	switch {
	case acct != nil && acct.CallerID.Number != "":
		res.CallerID = acct.CallerID
	case ti.callerID.Number != "":
		res.CallerID = ti.callerID
	default:
		res.CallerID = tr.CallerID
	}
	res.step(StepRoute, fmt.Sprintf("%s: trunk %s as %s", how, tr.Name, out))
	res.step(StepDial, "")
	return res
}

func blockedBy(prefixes []string, number string) (string, bool) {
	for _, p := range prefixes {
		if strings.HasPrefix(number, p) {
			return p, true
		}
	}
	return "", false
}
