package config

import (
	"fmt"
	"net"
	"net/mail"
	"strings"
)

// tenant checks a Tenant document: domain, time zone, the blocks it may
// override, ring groups, mailboxes and feature codes.
func (v *validator) tenant(t *Tenant) {
	m := &t.Meta
	if t.Domain == "" {
		v.errf(m, "domain", "tenant.domain", "domain (the tenant's SIP domain) is required")
	} else if !validDomain(t.Domain) {
		v.errf(m, "domain", "tenant.domain", "%q is not a host name or IP address", t.Domain)
	}
	v.timezone(m, "timezone", t.Timezone)
	if t.AllowInterTenant && !v.cfg.System.AllowInterTenant {
		v.warnf(m, "allowInterTenant", "inert.interTenant", "allowInterTenant has no effect while System.allowInterTenant is false")
	}
	if t.Recording != nil {
		v.recording(m, "recording", t.Recording, false)
	}
	v.roomService(m, t.RoomService, t.LiveKit)
	if t.Storage != nil {
		v.warnf(m, "storage", "inert.tenantStorage", "a tenant's storage block is ignored: recordings use the System bucket, separated by {tenant}")
	}
	if t.SMTP != nil {
		// Only the tenant's own fields are checked here: what it inherits is reported
		// once, on System. Whether from is required depends on the merged block.
		own := *t.SMTP
		own.Host = ""
		v.smtp(m, "smtp", &own)
		if eff := v.cfg.SMTPFor(t); t.Has("smtp.host") && eff.From == "" {
			v.errf(m, "smtp.host", "smtp.fromRequired", "host is set, so from is required")
		}
	}
	v.moh(m, "moh", t.MOH)
	if t.Limits != nil {
		v.limits(m, "limits", t.Limits)
	}
	v.tenantRingGroups(t)
	v.tenantMailboxes(t)
	v.featureCodes(t)
}

// tenantRingGroups checks a tenant's ring groups: a unique name, a known
// strategy, a positive ring timeout, and extensions its accounts have.
func (v *validator) tenantRingGroups(t *Tenant) {
	m := &t.Meta
	groups := map[string]bool{}
	for i, g := range t.RingGroups {
		p := fmt.Sprintf("ringGroups[%d]", i)
		if g.Name == "" {
			v.errf(m, p, "ringGroup.name", "a ring group needs a name")
		} else if groups[g.Name] {
			v.errf(m, p+".name", "ringGroup.name", "ring group %q is defined twice", g.Name)
		}
		groups[g.Name] = true
		if g.Strategy != StrategySimultaneous && g.Strategy != StrategySequential {
			v.errf(m, p+".strategy", "ringGroup.strategy", "strategy must be simultaneous or sequential, not %q", g.Strategy)
		}
		if g.RingTimeout <= 0 {
			v.errf(m, p+".ringTimeout", "ringGroup.ringTimeout", "ringTimeout must be positive")
		}
		if len(g.Extensions) == 0 {
			v.errf(m, p+".extensions", "ringGroup.extensions", "a ring group needs at least one extension")
		}
		for j, e := range g.Extensions {
			if _, ok := v.extensions[t.Name][e]; !ok {
				v.errf(m, fmt.Sprintf("%s.extensions[%d]", p, j), "ringGroup.extensions", "no account of tenant %s has extension %q", t.Name, e)
			}
		}
	}
}

// tenantMailboxes checks a tenant's mailboxes: one per extension of its
// accounts, a digits-only PIN, an email address, no negative limit.
func (v *validator) tenantMailboxes(t *Tenant) {
	m := &t.Meta
	if len(t.Mailboxes) > 0 && !v.cfg.System.Voicemail.Enabled {
		v.warnf(m, "mailboxes", "inert.mailboxes", "voicemail.enabled is false: calls never reach these mailboxes (the API still lists their messages)")
	}
	boxes := map[string]bool{}
	for i, b := range t.Mailboxes {
		p := fmt.Sprintf("mailboxes[%d]", i)
		if b.Extension == "" {
			v.errf(m, p, "mailbox.extension", "a mailbox needs an extension")
		} else {
			if boxes[b.Extension] {
				v.errf(m, p+".extension", "mailbox.extension", "extension %q has two mailboxes", b.Extension)
			} else if _, ok := v.extensions[t.Name][b.Extension]; !ok {
				v.errf(m, p+".extension", "mailbox.extension", "no account of tenant %s has extension %q", t.Name, b.Extension)
			}
			boxes[b.Extension] = true
		}
		if b.PIN != "" && strings.Trim(b.PIN.Reveal(), "0123456789") != "" {
			v.errf(m, p+".pin", "mailbox.pin", "a PIN is digits only")
		}
		if b.Email != "" {
			if _, err := mail.ParseAddress(b.Email); err != nil {
				v.errf(m, p+".email", "mailbox.email", "%q is not an email address", b.Email)
			}
		}
		v.nonNegative(m, p+".maxMessage", "voicemail.negative", b.MaxMessage)
		if b.MaxMessages < 0 {
			v.errf(m, p+".maxMessages", "mailbox.maxMessages", "maxMessages is negative (%d)", b.MaxMessages)
		}
	}
}

// featureCodes checks a tenant's feature codes: digits, * and # only, and
// not the same code twice.
func (v *validator) featureCodes(t *Tenant) {
	m := &t.Meta
	codes := []struct{ path, code string }{
		{"featureCodes.voicemail", t.FeatureCodes.Voicemail},
		{"featureCodes.voicemailOther", t.FeatureCodes.VoicemailOther},
	}
	for _, c := range codes {
		if strings.Trim(c.code, "0123456789*#") != "" || c.code == "" {
			v.errf(m, c.path, "tenant.featureCode", "a feature code uses only digits, * and #, not %q", c.code)
		}
	}
	if t.FeatureCodes.Voicemail == t.FeatureCodes.VoicemailOther {
		v.errf(m, "featureCodes.voicemailOther", "tenant.featureCode", "voicemail and voicemailOther are both %q", t.FeatureCodes.Voicemail)
	}
}

// validDomain reports whether d is an IP address or a host name.
func validDomain(d string) bool {
	if net.ParseIP(d) != nil {
		return true
	}
	if len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// account checks an Account document: tenant, password, extension and limits.
func (v *validator) account(a *Account) {
	m := &a.Meta
	if a.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", a.Tenant)
	}
	if a.Password == "" {
		v.errf(m, "password", "account.password", "password is required")
	}
	if a.Extension == "" {
		v.errf(m, "extension", "account.extension", "extension is required")
	} else if strings.ContainsAny(a.Extension, "@:;, \t") {
		v.errf(m, "extension", "account.extension", "extension %q may not contain '@', ':', ';', ',' or spaces", a.Extension)
	}
	if a.MaxContacts < 1 || a.MaxContacts > 100 {
		v.errf(m, "maxContacts", "account.maxContacts", "maxContacts must be between 1 and 100, not %d", a.MaxContacts)
	}
	if a.RingTimeout <= 0 {
		v.errf(m, "ringTimeout", "account.ringTimeout", "ringTimeout must be positive")
	}
}
