package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// trunk checks a Trunk document: host, tenant, port, transport and listener,
// registration and inbound source addresses.
func (v *validator) trunk(t *Trunk) {
	m := &t.Meta
	if t.Host == "" {
		v.errf(m, "host", "trunk.host", "host is required")
	}
	if t.Tenant != "" {
		if _, ok := v.tenants[t.Tenant]; !ok {
			v.errf(m, "tenant", "trunk.tenant", "unknown tenant %q%s", t.Tenant, suggestFrom(t.Tenant, v.tenantNames(), "tenants"))
		}
	}
	v.port(m, "port", "trunk.port", t.Port, false)
	if t.Transport != "udp" && t.Transport != "tcp" {
		v.errf(m, "transport", "trunk.transport", "transport must be udp or tcp, not %q", t.Transport)
	}
	if t.TransportID != "" {
		if l, ok := v.listeners[t.TransportID]; !ok {
			v.errf(m, "transportId", "trunk.transportId", "no listener has id %q%s", t.TransportID, suggestFrom(t.TransportID, v.listenerIDs(), "listeners"))
		} else if l.Transport != t.Transport && (t.Transport == "udp" || t.Transport == "tcp") {
			v.errf(m, "transportId", "trunk.transportId", "listener %q is %s but the trunk's transport is %s", t.TransportID, l.Transport, t.Transport)
		}
	}
	if t.Registration.Enabled && (t.Auth.Username == "" || t.Auth.Password == "") {
		v.errf(m, "registration.enabled", "trunk.registrationAuth", "registration needs auth.username and auth.password")
	}
	if t.Registration.Expiry <= 0 {
		v.errf(m, "registration.expiry", "trunk.expiry", "expiry must be positive")
	}
	v.prefixes(m, "inbound.matchIps", "trunk.matchIps", t.Inbound.MatchIPs)
}

var destinationTypes = []string{DestExtension, DestRingGroup, DestQueue, DestIVR, DestVoicemail, DestExternal, DestHangup}

// destination checks a destination's type and target within tenant.
func (v *validator) destination(m *Meta, path, tenant string, d *Destination, rule string) {
	if !contains(destinationTypes, d.Type) {
		if d.Type == "" {
			v.errf(m, path, "route.destinationType", "destination.type is required (%s)", strings.Join(destinationTypes, ", "))
		} else {
			v.errf(m, path+".type", "route.destinationType", "unknown destination type %q%s", d.Type, suggest(d.Type, destinationTypes))
		}
		return
	}
	if d.Type == DestHangup {
		return
	}
	if d.Target == "" {
		v.errf(m, path, rule, "destination.target is required for type %s", d.Type)
		return
	}
	if _, ok := v.tenants[tenant]; !ok {
		return // the unknown tenant is reported already
	}
	switch d.Type {
	case DestExtension:
		if _, ok := v.extensions[tenant][d.Target]; !ok {
			v.errf(m, path+".target", rule, "no account of tenant %s has extension %q", tenant, d.Target)
		}
	case DestRingGroup:
		if !v.ringGroups[tenant][d.Target] {
			v.errf(m, path+".target", rule, "tenant %s has no ring group %q", tenant, d.Target)
		}
	case DestVoicemail:
		if !v.mailboxes[tenant][d.Target] {
			v.errf(m, path+".target", rule, "tenant %s has no mailbox for extension %q", tenant, d.Target)
		}
	}
}

// inboundRoute checks an InboundRoute document: its tenant, DID and destination.
func (v *validator) inboundRoute(r *InboundRoute) {
	m := &r.Meta
	if r.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", r.Tenant)
	}
	if r.DID == "" {
		v.errf(m, "did", "route.did", "did is required")
	}
	v.destination(m, "destination", r.Tenant, &r.Destination, "route.target")
	if r.Destination.Type == DestQueue || r.Destination.Type == DestIVR {
		v.warnf(m, "destination.type", "inert.destination", "destination type %s validates but calls to it are answered 404", r.Destination.Type)
	}
}

// override checks an InboundOverride document: its DID, the tenant that takes
// the call, and the destination it may name.
func (v *validator) override(o *InboundOverride) {
	m := &o.Meta
	if o.DID == "" {
		v.errf(m, "did", "route.did", "did is required (a number, or * as the global catch-all)")
	}
	if o.Tenant == "" {
		v.errf(m, "tenant", "override.tenant", "tenant (the tenant that handles the call) is required")
	} else if _, ok := v.tenants[o.Tenant]; !ok {
		v.errf(m, "tenant", "override.tenant", "unknown tenant %q%s", o.Tenant, suggestFrom(o.Tenant, v.tenantNames(), "tenants"))
	}
	if o.Destination == nil {
		return
	}
	v.destination(m, "destination", o.Tenant, o.Destination, "override.target")
	if t := o.Destination.Type; contains(destinationTypes, t) && t != DestExtension && t != DestRingGroup {
		v.warnf(m, "destination.type", "inert.overrideDestination", "an override delivers only extension and ring_group; calls to a %s destination are logged as an invalid destination type and answered 404", t)
	}
}

// outboundRoute checks an OutboundRoute document: its tenant, pattern, strip
// and trunk.
func (v *validator) outboundRoute(r *OutboundRoute) {
	m := &r.Meta
	if r.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", r.Tenant)
	}
	if r.Pattern == "" {
		v.errf(m, "pattern", "outbound.pattern", "pattern is required")
	} else if _, err := regexp.Compile(r.Pattern); err != nil {
		v.errf(m, "pattern", "outbound.pattern", "pattern does not compile: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	if r.Strip < 0 {
		v.errf(m, "strip", "outbound.strip", "strip must not be negative")
	}
	if r.Trunk == "" {
		v.errf(m, "trunk", "outbound.trunk", "trunk is required")
	} else if _, ok := v.trunks[r.Trunk]; !ok {
		v.errf(m, "trunk", "outbound.trunk", "unknown trunk %q%s", r.Trunk, suggestFrom(r.Trunk, v.trunkNames(), "trunks"))
	}
}

// WebhookEvents are the event kinds a Webhook may subscribe to; call.ended
// (the finished call record) is beyond the specification.
var WebhookEvents = []string{"mobile.ringing", "mobile.ended", "call.ended"}

// webhook checks a Webhook document: its tenant, URL, events, secret and timeout.
func (v *validator) webhook(w *Webhook) {
	m := &w.Meta
	if w.Tenant != "" {
		v.knownTenant(m, "metadata.tenant", w.Tenant)
	}
	if w.URL == "" {
		v.errf(m, "url", "webhook.url", "url is required")
	} else if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errf(m, "url", "webhook.url", "url must be an http:// or https:// URL, not %q", w.URL)
	}
	if len(w.Events) == 0 {
		v.errf(m, "events", "webhook.event", "events is required (%s)", strings.Join(WebhookEvents, ", "))
	}
	for i, e := range w.Events {
		if !contains(WebhookEvents, e) {
			v.errf(m, fmt.Sprintf("events[%d]", i), "webhook.event", "unknown event %q%s", e, suggest(e, WebhookEvents))
		}
	}
	switch {
	case w.Secret != "" && w.SecretFile != "":
		v.errf(m, "secretFile", "webhook.secret", "secret and secretFile are both set; keep one")
	case w.Secret == "" && w.SecretFile == "":
		v.errf(m, "", "webhook.secret", "a webhook needs secret or secretFile: deliveries are signed")
	}
	v.readable(m, "secretFile", "secret.file", w.SecretFile)
	v.nonNegative(m, "timeout", "webhooks.negative", w.Timeout)
}
