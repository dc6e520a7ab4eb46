package appliance

import (
	"context"
	"fmt"
	"strings"

	"pbx/appliance/tenant"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
)

// router decides where a new call goes: for now, to an extension of the caller's
// tenant, forked to every registered contact of that extension.
type router struct {
	dir *tenant.Directory
	reg *registrar.Registrar
	sip *sipcore.Server
}

func (r *router) Route(ctx context.Context, in *b2bua.Inbound) b2bua.Decision {
	caller := in.Caller
	t := r.dir.Get(tenant.ID(caller.Tenant))
	if t == nil {
		return reject(403, b2bua.CauseRejected, fmt.Errorf("caller of unknown tenant %q", caller.Tenant))
	}
	dialled := in.RequestURI.User
	if dialled == "" {
		dialled = in.To.User
	}
	if host := in.RequestURI.Host; host != "" && !strings.EqualFold(host, t.Domain) && r.dir.ByDomain(host) != nil {
		return reject(403, b2bua.CauseRejected, fmt.Errorf("calls to another tenant's domain %q are not allowed", host))
	}
	callee, ok := t.Extensions[dialled]
	if !ok {
		return reject(404, b2bua.CauseNoRoute, fmt.Errorf("tenant %s has no extension %q", t.ID, dialled))
	}
	bindings := r.reg.Lookup(string(t.ID), callee.Extension)
	var legs []b2bua.LegTarget
	for _, b := range bindings {
		tg, ok := b.Target(r.sip.ConnectionOpen)
		if !ok {
			continue
		}
		legs = append(legs, b2bua.LegTarget{
			URI:         tg.URI,
			Destination: tg.Destination,
			Transport:   tg.Transport,
			Local:       tg.Local,
			Kind:        b2bua.KindEndpoint,
			Name:        callee.Extension,
			Extension:   callee.Extension,
		})
	}
	if len(legs) == 0 {
		return reject(480, b2bua.CauseFailed, fmt.Errorf("extension %s of tenant %s has no registered phone", callee.Extension, t.ID))
	}
	from := caller.Extension
	name := caller.DisplayName
	if a, ok := t.Accounts[caller.Username]; ok {
		if a.DisplayName != "" {
			name = a.DisplayName
		}
		from = a.Extension
	}
	return b2bua.Decision{Target: &b2bua.Target{
		Legs:        legs,
		RingTimeout: callee.RingTimeout,
		CallerID:    b2bua.Identity{User: from, DisplayName: name, Host: t.Domain},
		Meta: b2bua.Meta{
			Tenant:    string(t.ID),
			Direction: b2bua.DirectionInternal,
			Extension: callee.Extension,
			Domain:    t.Domain,
		},
	}}
}

func reject(status int, cause string, err error) b2bua.Decision {
	return b2bua.Decision{Reject: &b2bua.Rejection{Status: status, Cause: cause, Err: err}}
}
