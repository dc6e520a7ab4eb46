package appliance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"pbx/appliance/buildinfo"
	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/tenant"
	"pbx/appliance/upload"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
	"pbx/web/api"
)

// apiSources adapts the running parts to the interfaces the management API reads.
type apiSources struct {
	started time.Time
	cfg     *config.Config
	dir     *tenant.Directory
	reg     *registrar.Registrar
	calls   *b2bua.Manager
	trunks  *trunk.Manager
	cdr     *cdr.Store    // nil without call records
	uploads *upload.Queue // nil unless recordings go to s3
}

func (s *apiSources) backends() api.Backends {
	return api.Backends{
		Status:        s,
		Tenants:       s,
		Trunks:        trunkSource{s},
		Registrations: registrationSource{s},
		Calls:         callSource{s},
	}
}

func (s *apiSources) Status(ctx context.Context) (api.StatusSnapshot, error) {
	snap := api.StatusSnapshot{Version: buildinfo.Version, StartedAt: s.started, Tenants: map[string]api.Counts{}}
	if s.cdr != nil {
		if p := s.cdr.Backlog().Problem(); p != "" {
			snap.Problems = append(snap.Problems, p)
		}
	}
	if s.uploads != nil {
		st := s.uploads.Stats()
		snap.Uploads = &api.UploadQueue{Pending: st.Pending, OldestAgeS: int64(st.OldestAge.Seconds()), Failed: st.Failed}
	}
	for _, t := range s.dir.Tenants() {
		snap.Tenants[string(t.ID)] = api.Counts{}
	}
	count := func(tn string, f func(*api.Counts)) {
		if _, ok := snap.Tenants[tn]; !ok {
			f(&snap.Shared)
			return
		}
		c := snap.Tenants[tn]
		f(&c)
		snap.Tenants[tn] = c
	}
	for _, c := range s.calls.Calls() {
		sides := sidesOf(&c)
		if len(sides) == 0 {
			count("", func(n *api.Counts) { n.CallsActive++ })
		}
		for _, sd := range sides {
			count(sd.Tenant, func(n *api.Counts) { n.CallsActive++ })
		}
	}
	for tn, regs := range s.reg.CountByTenant() {
		count(tn, func(n *api.Counts) { n.Registrations += regs })
	}
	for _, t := range s.trunks.Status() {
		// A trunk that does not register is up; one that does, while registered.
		count(t.Tenant, func(n *api.Counts) {
			if t.State == trunk.StateRegistered || t.State == trunk.StateDisabled {
				n.TrunksUp++
			} else {
				n.TrunksDown++
			}
		})
	}
	return snap, nil
}

func (s *apiSources) Tenants(ctx context.Context) ([]api.Tenant, error) {
	var out []api.Tenant
	for _, t := range s.dir.Tenants() {
		exts := make([]string, 0, len(t.Extensions))
		for e := range t.Extensions {
			exts = append(exts, e)
		}
		sort.Strings(exts)
		dids := append([]string{}, t.DIDs...)
		sort.Strings(dids)
		out = append(out, api.Tenant{Name: string(t.ID), Domain: t.Domain, Accounts: len(t.Accounts), Extensions: exts, DIDs: dids})
	}
	return out, nil
}

type trunkSource struct{ s *apiSources }

func (t trunkSource) Trunks(ctx context.Context) ([]api.Trunk, error) {
	out := []api.Trunk{}
	for _, st := range t.s.trunks.Status() {
		out = append(out, apiTrunk(st))
	}
	return out, nil
}

// apiTrunk is a trunk's state as the management API shows it.
func apiTrunk(st trunk.Status) api.Trunk {
	reg := api.TrunkRegistration{Enabled: st.Register, State: st.State, LastError: st.LastError}
	if !st.ExpiresAt.IsZero() {
		e := st.ExpiresAt
		reg.ExpiresAt = &e
	}
	addrs := st.Addresses
	if addrs == nil {
		addrs = []string{}
	}
	return api.Trunk{
		Name: st.Name, Tenant: st.Tenant, Host: st.Host, Port: st.Port, Transport: st.Transport,
		Registration: reg, Addresses: addrs,
	}
}

// Refresh re-resolves the trunk's addresses and re-registers it, in the
// background.
func (t trunkSource) Refresh(ctx context.Context, name string) error {
	if err := t.s.trunks.Refresh(name); err != nil {
		if errors.Is(err, trunk.ErrUnknownTrunk) {
			return fmt.Errorf("%w: trunk %s", api.ErrNotFound, name)
		}
		return err
	}
	return nil
}

type registrationSource struct{ s *apiSources }

// Registrations lists every live binding, then one row with no contact for
// each account that has none, so that ?online=false finds the accounts no
// phone is registered to.
func (r registrationSource) Registrations(ctx context.Context) ([]api.Registration, error) {
	out := []api.Registration{}
	bound := map[[2]string]bool{}
	for _, b := range r.s.reg.List() {
		bound[[2]string{b.Tenant, b.Username}] = true
		out = append(out, apiRegistration(b))
	}
	for _, t := range r.s.dir.Tenants() {
		for _, name := range slices.Sorted(maps.Keys(t.Accounts)) {
			if a := t.Accounts[name]; !bound[[2]string{string(t.ID), name}] {
				out = append(out, api.Registration{Tenant: string(t.ID), Extension: a.Extension, Username: name})
			}
		}
	}
	return out, nil
}

// apiRegistration is a binding as the management API shows it.
func apiRegistration(b registrar.Binding) api.Registration {
	return api.Registration{
		Tenant: b.Tenant, Extension: b.Extension, Username: b.Username, Contact: b.Contact,
		Source: b.Source.String(), Transport: b.Transport, UserAgent: b.UserAgent, ExpiresAt: b.Expires,
	}
}

func (r registrationSource) Drop(ctx context.Context, tenant, extension string) error {
	if r.s.reg.Drop(tenant, extension) == 0 {
		return fmt.Errorf("%w: no registration of %s/%s", api.ErrNotFound, tenant, extension)
	}
	return nil
}

type callSource struct{ s *apiSources }

// Calls lists the live calls once per tenant that sees them (an
// inter-tenant call twice, under one id), so a tenant's token sees its
// side; a call of no tenant once.
func (c callSource) Calls(ctx context.Context) ([]api.Call, error) {
	out := []api.Call{}
	for _, ci := range c.s.calls.Calls() {
		call := apiCall(&ci)
		sides := sidesOf(&ci)
		if len(sides) == 0 {
			out = append(out, call)
		}
		for _, sd := range sides {
			call.Tenant = sd.Tenant
			out = append(out, call)
		}
	}
	return out, nil
}

// apiCall is a live call as the management API shows it, its caller named
// as on its record.
func apiCall(ci *b2bua.CallInfo) api.Call {
	from, _ := ci.Calling()
	call := api.Call{
		ID: string(ci.ID), Tenant: ci.Tenant, Direction: ci.Direction, From: from, To: ci.To,
		State: ci.State, StartedAt: ci.Start, Legs: []api.CallLeg{}, Held: ci.Held,
	}
	if !ci.Answer.IsZero() {
		a := ci.Answer
		call.AnsweredAt = &a
	}
	for _, l := range ci.Legs {
		state := "ringing"
		switch {
		case l.Won:
			state = "answered"
		case !l.End.IsZero():
			state = "ended"
		}
		call.Legs = append(call.Legs, api.CallLeg{Target: l.Target, Kind: l.Kind, State: state})
	}
	return call
}

func (c callSource) Hangup(ctx context.Context, id string) error {
	err := c.s.calls.Hangup(b2bua.CallID(id))
	if errors.Is(err, b2bua.ErrNoSuchCall) {
		return fmt.Errorf("%w: call %s", api.ErrNotFound, id)
	}
	return err
}
