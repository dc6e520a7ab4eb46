package config

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

// validator runs every check of the specification over a decoded configuration.
// Per-document checks come first, then cross-document ones; none stops the others.
type validator struct {
	cfg *Config
	l   *loader

	tenants    map[string]*Tenant
	trunks     map[string]*Trunk
	listeners  map[string]*Listener
	extensions map[string]map[string]*Account // tenant -> extension -> account
	ringGroups map[string]map[string]bool     // tenant -> ring group name
	mailboxes  map[string]map[string]bool     // tenant -> mailbox extension
}

func (v *validator) errf(m *Meta, path, rule, format string, args ...any) {
	mustRule(rule)
	v.l.add(m, path, rule, fmt.Sprintf(format, args...))
}

func (v *validator) warnf(m *Meta, path, rule, format string, args ...any) {
	mustRule(rule)
	v.l.warn(m, path, rule, fmt.Sprintf(format, args...))
}

func (v *validator) run() {
	v.index()
	v.system()
	for _, t := range v.cfg.Trunks {
		v.trunk(t)
	}
	for _, t := range v.cfg.Tenants {
		v.tenant(t)
	}
	for _, a := range v.cfg.Accounts {
		v.account(a)
	}
	for _, r := range v.cfg.InboundRoutes {
		v.inboundRoute(r)
	}
	for _, o := range v.cfg.InboundOverrides {
		v.override(o)
	}
	for _, r := range v.cfg.OutboundRoutes {
		v.outboundRoute(r)
	}
	for _, w := range v.cfg.Webhooks {
		v.webhook(w)
	}
	v.crossDocument()
}

// index builds the lookup tables the checks use and reports duplicate names.
func (v *validator) index() {
	c := v.cfg
	v.tenants = map[string]*Tenant{}
	v.trunks = map[string]*Trunk{}
	v.listeners = map[string]*Listener{}
	v.extensions = map[string]map[string]*Account{}
	v.ringGroups = map[string]map[string]bool{}
	v.mailboxes = map[string]map[string]bool{}

	seen := map[string]*Meta{}
	dup := func(m *Meta) bool {
		if m.Name == "" {
			return false
		}
		key := m.Kind + "\x00" + m.Tenant + "\x00" + m.Name
		if first, ok := seen[key]; ok {
			scope := ""
			if m.Tenant != "" {
				scope = " in tenant " + m.Tenant
			}
			v.errf(m, "metadata.name", "doc.nameDuplicate", "%s %q is defined twice%s; the first is at %s:%d", m.Kind, m.Name, scope, first.File, first.Line)
			return true
		}
		seen[key] = m
		return false
	}
	for _, t := range c.Tenants {
		if !dup(&t.Meta) {
			v.tenants[t.Name] = t
		}
	}
	for _, t := range c.Trunks {
		if !dup(&t.Meta) {
			v.trunks[t.Name] = t
		}
	}
	for _, o := range c.InboundOverrides {
		dup(&o.Meta)
	}
	for _, r := range c.OutboundRoutes {
		dup(&r.Meta)
	}
	for _, r := range c.InboundRoutes {
		dup(&r.Meta)
	}
	for _, w := range c.Webhooks {
		dup(&w.Meta)
	}
	for _, a := range c.Accounts {
		if dup(&a.Meta) || a.Extension == "" {
			continue
		}
		exts := v.extensions[a.Tenant]
		if exts == nil {
			exts = map[string]*Account{}
			v.extensions[a.Tenant] = exts
		}
		if first, ok := exts[a.Extension]; ok {
			v.errf(&a.Meta, "extension", "account.extensionDuplicate", "extension %q is already used by Account/%s (%s:%d)", a.Extension, first.displayName(), first.File, first.Line)
			continue
		}
		exts[a.Extension] = a
	}
	for _, t := range c.Tenants {
		groups := map[string]bool{}
		for _, g := range t.RingGroups {
			if g.Name != "" {
				groups[g.Name] = true
			}
		}
		v.ringGroups[t.Name] = groups
		boxes := map[string]bool{}
		for _, b := range t.Mailboxes {
			if b.Extension != "" {
				boxes[b.Extension] = true
			}
		}
		v.mailboxes[t.Name] = boxes
	}
	for i := range c.System.SIP.Transports {
		l := &c.System.SIP.Transports[i]
		if _, ok := v.listeners[l.ID]; !ok {
			v.listeners[l.ID] = l
		}
	}
}

func (v *validator) knownTenant(m *Meta, path, name string) bool {
	if _, ok := v.tenants[name]; ok {
		return true
	}
	v.errf(m, path, "doc.unknownTenant", "unknown tenant %q%s", name, suggestFrom(name, v.tenantNames(), "tenants"))
	return false
}

// suggestFrom is suggest for names that documents define: with none defined, it
// says so rather than suggesting nothing.
func suggestFrom(name string, names []string, what string) string {
	if len(names) == 0 {
		return " (no " + what + " are defined)"
	}
	return suggest(name, names)
}

func (v *validator) tenantNames() []string { return slices.Sorted(maps.Keys(v.tenants)) }
func (v *validator) listenerIDs() []string { return slices.Sorted(maps.Keys(v.listeners)) }
func (v *validator) trunkNames() []string  { return slices.Sorted(maps.Keys(v.trunks)) }

func (v *validator) port(m *Meta, path, rule string, p int, zeroOK bool) {
	if p == 0 && zeroOK {
		return
	}
	if p < 1 || p > 65535 {
		v.errf(m, path, rule, "port %d is out of range (1-65535)", p)
	}
}

func (v *validator) nonNegative(m *Meta, path, rule string, d Duration) {
	if d < 0 {
		v.errf(m, path, rule, "must not be negative (%s)", d)
	}
}

// readable checks that a file named by the configuration can be read.
func (v *validator) readable(m *Meta, path, rule, file string) {
	if file == "" {
		return
	}
	f, err := os.Open(v.cfg.Path(file))
	if err != nil {
		v.errf(m, path, rule, "cannot read %s: %v", file, cleanErr(err))
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		v.errf(m, path, rule, "%s is a directory, not a file", file)
	}
}

// cleanErr drops the path an *os.PathError repeats.
func cleanErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func (v *validator) timezone(m *Meta, path, tz string) {
	if tz == "" || tz == "Local" {
		return
	}
	if _, err := time.LoadLocation(tz); err != nil {
		v.errf(m, path, "timezone", "unknown time zone %q (use an IANA name such as Europe/Berlin)", tz)
	}
}

// prefixes checks a list of address prefixes or bare addresses.
func (v *validator) prefixes(m *Meta, path, rule string, list []string) {
	for i, s := range list {
		if !validPrefix(s) {
			v.errf(m, fmt.Sprintf("%s[%d]", path, i), rule, "%q is neither an address nor a prefix such as 203.0.113.0/24", s)
		}
	}
}

func validPrefix(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return true
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

func readableDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return cleanErr(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return cleanErr(err)
	}
	if !st.IsDir() {
		return fmt.Errorf("not a directory")
	}
	if _, err := f.Readdirnames(1); err != nil && err.Error() != "EOF" {
		return cleanErr(err)
	}
	return nil
}

// mohClass checks that a named music-on-hold class exists in the tenant's
// moh block or the System's.
func (v *validator) mohClass(m *Meta, tenant, class string) {
	if class == "" {
		return
	}
	if s := v.cfg.System.MOH; s != nil {
		if _, ok := s.Classes[class]; ok || class == "default" {
			return
		}
	}
	if t := v.tenants[tenant]; t != nil && t.MOH != nil {
		if _, ok := t.MOH.Classes[class]; ok || class == "default" {
			return
		}
	}
	v.errf(m, "mohClass", "moh.class", "no music-on-hold class %q in Tenant/%s or the System", class, tenant)
}

// crossDocument runs the checks that compare documents: music-on-hold classes
// named by accounts and routes, and domains and DIDs claimed twice across tenants.
func (v *validator) crossDocument() {
	for _, a := range v.cfg.Accounts {
		v.mohClass(&a.Meta, a.Tenant, a.MOHClass)
	}
	for _, r := range v.cfg.InboundRoutes {
		v.mohClass(&r.Meta, r.Tenant, r.MOHClass)
	}
	domains := map[string]*Tenant{}
	for _, t := range v.cfg.Tenants {
		if t.Domain == "" {
			continue
		}
		key := strings.ToLower(t.Domain)
		if first, ok := domains[key]; ok {
			v.errf(&t.Meta, "domain", "tenant.domainDuplicate", "domain %q is already claimed by Tenant/%s (%s:%d)", t.Domain, first.Name, first.File, first.LineOf("domain"))
			continue
		}
		domains[key] = t
	}
	owners := map[string]*InboundRoute{}
	prio := map[string]*InboundRoute{}
	for _, r := range v.cfg.InboundRoutes {
		if r.DID == "" {
			continue
		}
		if first, ok := owners[r.DID]; ok && first.Tenant != r.Tenant {
			v.errf(&r.Meta, "did", "did.duplicate", "DID %q is already claimed by tenant %s (InboundRoute/%s, %s:%d)", r.DID, first.Tenant, first.displayName(), first.File, first.LineOf("did"))
			continue
		}
		if _, ok := owners[r.DID]; !ok {
			owners[r.DID] = r
		}
		pk := fmt.Sprintf("%s\x00%s\x00%d", r.Tenant, r.DID, r.Priority)
		if first, ok := prio[pk]; ok {
			v.errf(&r.Meta, "priority", "did.duplicate", "DID %q already has a route with priority %d (InboundRoute/%s, %s:%d)", r.DID, r.Priority, first.displayName(), first.File, first.LineOf("did"))
			continue
		}
		prio[pk] = r
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
