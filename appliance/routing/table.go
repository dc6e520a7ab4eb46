package routing

import (
	"slices"
	"strings"

	"pbx/appliance/config"
)

// Table is the routing configuration compiled for lookups. It is
// immutable and safe for concurrent use.
type Table struct {
	tenants      map[string]*tenantInfo
	byDomain     map[string]*tenantInfo
	didOwner     map[string]*tenantInfo
	overrides    map[string][]*config.InboundOverride // by did, in order
	catchAll     []*config.InboundOverride
	global       routeSet
	trunks       map[string]*config.Trunk
	defaultTrunk string
}

type tenantInfo struct {
	name        string
	domain      string
	callerID    config.CallerID
	interTenant bool // effective: the tenant's and the System ceiling
	accounts    map[string]*config.Account
	extensions  map[string]*config.Account
	ringGroups  map[string]*config.RingGroup
	routes      map[string][]*config.InboundRoute // by did, in order
	outbound    routeSet
	blocked     []string
	features    config.FeatureCodes
}

// New compiles cfg, which must have passed validation.
func New(cfg *config.Config) *Table {
	t := &Table{
		tenants:      map[string]*tenantInfo{},
		byDomain:     map[string]*tenantInfo{},
		didOwner:     map[string]*tenantInfo{},
		overrides:    map[string][]*config.InboundOverride{},
		trunks:       map[string]*config.Trunk{},
		defaultTrunk: cfg.System.DefaultTrunk,
	}
	sysBlocked := nonEmpty(cfg.System.Security.Limits.BlockedPrefixes)
	for _, tc := range cfg.Tenants {
		ti := &tenantInfo{
			name:        tc.Name,
			domain:      strings.ToLower(tc.Domain),
			callerID:    tc.CallerID,
			interTenant: tc.AllowInterTenant && cfg.System.AllowInterTenant,
			features:    tc.FeatureCodes,
			accounts:    map[string]*config.Account{},
			extensions:  map[string]*config.Account{},
			ringGroups:  map[string]*config.RingGroup{},
			routes:      map[string][]*config.InboundRoute{},
			blocked:     sysBlocked,
		}
		// A tenant's list replaces the System's when the tenant spells it
		// out, even empty (key by key, as for the other limits).
		if tc.Limits != nil && (tc.Limits.BlockedPrefixes != nil || tc.Has("limits.blockedPrefixes")) {
			ti.blocked = nonEmpty(tc.Limits.BlockedPrefixes)
		}
		for i := range tc.RingGroups {
			g := &tc.RingGroups[i]
			ti.ringGroups[g.Name] = g
		}
		t.tenants[ti.name] = ti
		t.byDomain[ti.domain] = ti
	}
	for _, a := range cfg.Accounts {
		if ti := t.tenants[a.Tenant]; ti != nil {
			ti.accounts[a.Name] = a
			if a.Extension != "" {
				ti.extensions[a.Extension] = a
			}
		}
	}
	for _, r := range cfg.InboundRoutes {
		ti := t.tenants[r.Tenant]
		if ti == nil {
			continue
		}
		ti.routes[r.DID] = append(ti.routes[r.DID], r)
		if _, ok := t.didOwner[r.DID]; !ok && r.DID != "*" {
			t.didOwner[r.DID] = ti
		}
	}
	for _, ti := range t.tenants {
		for _, rs := range ti.routes {
			slices.SortStableFunc(rs, func(a, b *config.InboundRoute) int {
				if a.Priority != b.Priority {
					return a.Priority - b.Priority
				}
				return strings.Compare(a.Name, b.Name)
			})
		}
	}
	for _, o := range cfg.InboundOverrides {
		if o.DID == "*" {
			t.catchAll = append(t.catchAll, o)
		} else {
			t.overrides[o.DID] = append(t.overrides[o.DID], o)
		}
	}
	byOrder := func(a, b *config.InboundOverride) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		return strings.Compare(a.Name, b.Name)
	}
	for _, os := range t.overrides {
		slices.SortStableFunc(os, byOrder)
	}
	slices.SortStableFunc(t.catchAll, byOrder)

	var global []*config.OutboundRoute
	perTenant := map[string][]*config.OutboundRoute{}
	for _, r := range cfg.OutboundRoutes {
		if r.Tenant == "" {
			global = append(global, r)
		} else {
			perTenant[r.Tenant] = append(perTenant[r.Tenant], r)
		}
	}
	t.global = newRouteSet(global)
	for name, rs := range perTenant {
		if ti := t.tenants[name]; ti != nil {
			ti.outbound = newRouteSet(rs)
		}
	}
	for _, tr := range cfg.Trunks {
		t.trunks[tr.Name] = tr
	}
	return t
}

func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Trunk returns the trunk named name.
func (t *Table) Trunk(name string) (*config.Trunk, bool) {
	tr, ok := t.trunks[name]
	return tr, ok
}

// TenantOfDomain returns the tenant owning a SIP domain (case-insensitive).
func (t *Table) TenantOfDomain(domain string) (string, bool) {
	ti, ok := t.byDomain[strings.ToLower(domain)]
	if !ok {
		return "", false
	}
	return ti.name, true
}
