package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/guard"
	"pbx/appliance/logging"
	"pbx/appliance/moh"
	"pbx/appliance/recording"
	"pbx/appliance/routing"
	"pbx/appliance/tenant"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
)

// router decides where a new call goes (routing.Table) and turns the
// decision into legs: the registered contacts of an extension or of a ring
// group's extensions, or one INVITE to a trunk. It also identifies trunks
// by source address, and keeps each call's routing steps for its record.
type router struct {
	dir    *tenant.Directory
	table  *routing.Table
	reg    *registrar.Registrar
	sip    *sipcore.Server
	trunks *trunk.Manager
	limits *guard.Limiter // security.limits; nil means none
	steps  *stepLog
	log    *slog.Logger
	// nameFallback is the From display name when the caller has none
	// (sip.contactUser).
	nameFallback string
}

func newRouter(cfg *config.Config, dir *tenant.Directory, reg *registrar.Registrar, sip *sipcore.Server, trunks *trunk.Manager, limits *guard.Limiter, log *slog.Logger) *router {
	r := &router{dir: dir, table: routing.New(cfg), reg: reg, sip: sip, trunks: trunks, limits: limits, steps: newStepLog(), log: log}
	if cu := cfg.System.SIP.ContactUser; cu != nil {
		r.nameFallback = *cu
	}
	return r
}

// identify trusts an INVITE from a trunk's source address without a
// challenge. Any other INVITE must authenticate: it is challenged (407),
// unless neither its From host nor its Request-URI host is a tenant's
// domain, when no credentials could ever match and it is refused (403) at
// once. A request with credentials or a room-service grant (X-Pbx-Token)
// is left to those checks.
func (r *router) identify(req *sip.Request, src netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
	if req.GetHeader("Proxy-Authorization") != nil || req.GetHeader("Authorization") != nil || req.GetHeader("X-Pbx-Token") != nil {
		return b2bua.Caller{}, false, nil
	}
	if tr, ok := r.trunks.Match(src.Addr(), req.Recipient.User); ok {
		return b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: tr.Tenant, Trunk: tr.Name}, true, nil
	}
	from := req.From()
	if from != nil && r.dir.ByDomain(from.Address.Host) == nil && r.dir.ByDomain(req.Recipient.Host) == nil {
		err := fmt.Errorf("INVITE from %s: no trunk has this address and neither %q nor %q is a tenant's domain", src, from.Address.Host, req.Recipient.Host)
		r.log.Info("call refused", "remote", src.String(), "to", req.Recipient.User, "err", err, logging.KindKey, "sip.call_refused")
		return b2bua.Caller{}, false, &b2bua.Rejection{Status: sip.StatusForbidden, Cause: b2bua.CauseRejected, Err: err}
	}
	return b2bua.Caller{}, false, nil
}

func (r *router) Route(ctx context.Context, in *b2bua.Inbound) b2bua.Decision {
	var res routing.Result
	if in.Transfer != nil {
		r.transferor(in)
	}
	caller := in.Caller
	if caller.Kind == b2bua.KindTrunk {
		res = r.table.Inbound(routing.InboundCall{Trunk: caller.Trunk, Numbers: r.dialled(in)})
	} else {
		user := in.RequestURI.User
		if user == "" {
			user = in.To.User
		}
		// The domain dialled: the To host when it is a tenant's (a phone
		// sending through the PBX's address as its proxy still names the
		// domain there), else the Request-URI host.
		host := in.RequestURI.Host
		if _, ok := r.table.TenantOfDomain(in.To.Host); ok {
			host = in.To.Host
		}
		res = r.table.FromAccount(caller.Tenant, caller.Username, user, host)
	}
	dec := r.decide(in, &res)
	if dec.Target != nil {
		r.presented(in, dec.Target)
	}
	if in.Transfer != nil {
		r.steps.addTransfer(in.ID, in.Transfer, res.Steps)
	} else {
		r.steps.put(in.ID, res.Steps)
	}
	return dec
}

// transferor completes the identity of a phone that transferred the call
// it answered (the b2bua knows its extension, not its account), so the
// transfer's new leg is routed as a call from that account.
func (r *router) transferor(in *b2bua.Inbound) {
	c := &in.Caller
	if c.Kind != b2bua.KindEndpoint || c.Username != "" || c.Extension == "" {
		return
	}
	if a := r.account(c.Tenant, c.Extension); a != nil {
		c.Username, c.DisplayName = a.Username, a.DisplayName
	}
}

// dialled lists the numbers a trunk's INVITE may be for: the Request-URI
// user, unless it is the trunk's own contact user (a carrier sending to the
// registered Contact), then the To user.
func (r *router) dialled(in *b2bua.Inbound) []string {
	var nums []string
	ru := in.RequestURI.User
	if tr, ok := r.trunks.Trunk(in.Caller.Trunk); !ok || (ru != tr.ContactUser && ru != tr.Username) {
		nums = append(nums, ru)
	}
	return append(nums, in.To.User)
}

func (r *router) decide(in *b2bua.Inbound, res *routing.Result) b2bua.Decision {
	caller := in.Caller
	meta := b2bua.Meta{Tenant: res.Tenant, Direction: res.Direction, DID: res.DID, Domain: res.Domain}
	switch {
	case caller.Kind == b2bua.KindTrunk:
		meta.Trunk = caller.Trunk
	case res.Trunk != nil:
		meta.Trunk = res.Trunk.Name
	}
	if res.Kind == routing.KindTrunk {
		meta.Egress = b2bua.KindTrunk
	}
	if res.Record != nil {
		meta.Extra = map[string]string{recording.ExtraRouteRecord: strconv.FormatBool(*res.Record)}
	}
	if res.MOHClass != "" {
		if meta.Extra == nil {
			meta.Extra = map[string]string{}
		}
		meta.Extra[moh.ExtraClass] = res.MOHClass
	}
	// The record's extension: the one called, or on an outbound call the
	// one calling.
	meta.Extension = res.Extension
	if res.Direction == routing.DirectionOutbound {
		meta.Extension = caller.Extension
		if res.CallerID.Number != "" {
			meta.DID = res.CallerID.Number
		}
	}
	target := &b2bua.Target{Meta: meta, CallerID: r.callerID(in, res)}

	if res.Kind == routing.KindReject {
		return rejectWith(target, res.Status, res.Cause, errors.New(res.Reason))
	}
	if rej := r.reserve(in, res); rej != nil {
		return rejectWith(target, rej.Status, rej.Cause, rej.Err)
	}
	switch res.Kind {
	case routing.KindExtension:
		acct := r.account(res.Tenant, res.Extension)
		target.Legs = b2bua.LegsFor(r.reg.Lookup(res.Tenant, res.Extension), r.sip.ConnectionOpen, res.Extension, res.Extension)
		if acct != nil {
			target.RingTimeout = acct.RingTimeout
		}
		if len(target.Legs) == 0 {
			r.failLast(res, "no registered phone")
			return rejectWith(target, sip.StatusTemporarilyUnavailable, b2bua.CauseFailed,
				fmt.Errorf("extension %s of tenant %s has no registered phone", res.Extension, res.Tenant))
		}
	case routing.KindRingGroup:
		g := res.RingGroup
		sequential := g.Strategy == config.StrategySequential
		ring := g.RingTimeout.D()
		var delay time.Duration
		for _, ext := range g.Extensions {
			legs := b2bua.LegsFor(r.reg.Lookup(res.Tenant, ext), r.sip.ConnectionOpen, ext, ext)
			if len(legs) == 0 {
				continue // an extension without a phone costs no ring time
			}
			if sequential {
				for i := range legs {
					legs[i].Delay, legs[i].Timeout = delay, ring
				}
				delay += ring
			}
			target.Legs = append(target.Legs, legs...)
		}
		target.RingTimeout = ring
		if sequential {
			target.RingTimeout = delay
		}
		if len(target.Legs) == 0 {
			r.failLast(res, "no registered phone")
			return rejectWith(target, sip.StatusTemporarilyUnavailable, b2bua.CauseFailed,
				fmt.Errorf("no extension of ring group %s of tenant %s has a registered phone", g.Name, res.Tenant))
		}
	case routing.KindTrunk:
		leg, err := r.trunkLeg(res, &target.CallerID)
		if err != nil {
			r.failLast(res, err.Error())
			return rejectWith(target, sip.StatusServiceUnavailable, b2bua.CauseFailed, err)
		}
		target.Legs = []b2bua.LegTarget{leg}
	}
	return b2bua.Decision{Target: target}
}

// presented completes the caller identity once the legs are built (a
// trunk's P-Asserted-Identity asserts only a configured name): with no
// display name of its own the caller is presented as sip.contactUser. The
// call record names the caller as its extension (or number) and the name
// presented.
func (r *router) presented(in *b2bua.Inbound, t *b2bua.Target) {
	if t.CallerID.DisplayName == "" {
		t.CallerID.DisplayName = r.nameFallback
	}
	t.Meta.From, t.Meta.FromName = in.From.User, t.CallerID.DisplayName
	if in.Caller.Kind == b2bua.KindEndpoint && in.Caller.Extension != "" {
		t.Meta.From = in.Caller.Extension
	}
}

// reserve takes the call's place under security.limits once the tenant is
// known; the Limiter gives it back when the call ends. A call that leaves on
// a trunk is outbound there, also when it arrived on one. A phone's
// per-account limit is its own tenant's, also when it calls another
// tenant. Concurrency limits answer 503 (the caller may try later),
// outbound rate and minutes limits 403.
func (r *router) reserve(in *b2bua.Inbound, res *routing.Result) *b2bua.Rejection {
	if r.limits == nil || res.Tenant == "" {
		return nil
	}
	claim := guard.Claim{Tenant: res.Tenant, Outbound: res.Kind == routing.KindTrunk}
	if in.Caller.Kind == b2bua.KindEndpoint { // per-account limits apply to authenticated phones
		claim.Account = in.Caller.Username
		if in.Caller.Tenant != res.Tenant {
			claim.CallerTenant = in.Caller.Tenant
		}
	}
	reserve := r.limits.ReserveCall
	if in.Transfer != nil {
		// The transferor hands its call on and makes no new one: the
		// per-account limit does not count the new leg.
		claim.Account, claim.CallerTenant = "", ""
		reserve = r.limits.ReserveTransfer
	}
	err := reserve(in.ID, claim)
	if err == nil {
		return nil
	}
	status := sip.StatusForbidden
	if errors.Is(err, guard.ErrConcurrentCalls) || errors.Is(err, guard.ErrConcurrentPerAccount) {
		status = sip.StatusServiceUnavailable
	}
	r.log.Info("call refused by limits", "tenant", res.Tenant, "caller_tenant", claim.CallerTenant, "account", claim.Account, "err", err)
	return &b2bua.Rejection{Status: status, Cause: b2bua.CauseRejected, Err: err}
}

// rejectWith refuses the call and still hands b2bua the target's metadata
// (tenant, direction, did, trunk) for the call record.
func rejectWith(t *b2bua.Target, status int, cause string, err error) b2bua.Decision {
	t.Legs = nil
	return b2bua.Decision{Reject: &b2bua.Rejection{Status: status, Cause: cause, Err: err}, Target: t}
}

// failLast marks the last step as failed when the legs cannot be built.
func (r *router) failLast(res *routing.Result, msg string) {
	if n := len(res.Steps); n > 0 {
		res.Steps[n-1].Result, res.Steps[n-1].Error = b2bua.CauseFailed, msg
	}
}

func (r *router) account(tn, ext string) *tenant.Account {
	t := r.dir.Get(tenant.ID(tn))
	if t == nil {
		return nil
	}
	return t.Extensions[ext]
}

// callerID is who callees see: a carrier's caller as it came in, a phone as
// its extension and display name (from its own tenant's domain), and on a
// trunk the identity routing chose.
func (r *router) callerID(in *b2bua.Inbound, res *routing.Result) b2bua.Identity {
	caller := in.Caller
	if caller.Kind == b2bua.KindTrunk {
		id := b2bua.Identity{User: in.From.User, DisplayName: in.FromName, Host: res.Domain}
		if res.Kind == routing.KindTrunk {
			id.Host = "" // forwarded to a carrier: from the PBX's own address
		}
		return id
	}
	id := b2bua.Identity{User: caller.Extension, DisplayName: caller.DisplayName}
	if t := r.dir.Get(tenant.ID(caller.Tenant)); t != nil {
		id.Host = t.Domain
		if a, ok := t.Accounts[caller.Username]; ok {
			id.User = a.Extension
			if a.DisplayName != "" {
				id.DisplayName = a.DisplayName
			}
		}
	}
	if res.Kind == routing.KindTrunk && res.CallerID.Number != "" {
		id.User, id.DisplayName, id.Host = res.CallerID.Number, res.CallerID.Name, ""
	}
	return id
}

// trunkLeg is the INVITE toward a trunk: sip:number@host:port through the
// trunk's listener, with its credentials for a 401/407 and the configured
// caller identity in P-Asserted-Identity.
func (r *router) trunkLeg(res *routing.Result, id *b2bua.Identity) (b2bua.LegTarget, error) {
	tr := res.Trunk
	ep, err := r.sip.Endpoint(tr.Transport, tr.TransportID)
	if err != nil {
		return b2bua.LegTarget{}, fmt.Errorf("trunk %s: %w", tr.Name, err)
	}
	uri := sip.Uri{Scheme: "sip", User: res.Number, Host: tr.Host, Port: tr.Port}
	if ep.Transport == sipcore.TransportTCP {
		uri.UriParams = sip.HeaderParams{{K: "transport", V: "tcp"}}
	}
	leg := b2bua.LegTarget{
		URI:        uri,
		To:         sip.Uri{Scheme: "sip", User: res.Number, Host: tr.Host},
		Transport:  ep.Transport,
		ListenerID: ep.ListenerID,
		Kind:       b2bua.KindTrunk,
		Name:       tr.Name,
	}
	// The trunk's destinations, most preferred first (its SRV targets): the
	// leg moves on to the next on no answer or 503 (RFC 3263 section 4.3).
	if dests := r.trunks.Destinations(tr.Name); len(dests) > 0 {
		leg.Destination, leg.Alternates = dests[0], dests[1:]
	}
	if tr.Auth.Username != "" {
		leg.Auth = &b2bua.Credentials{Username: tr.Auth.Username, Password: tr.Auth.Password.Reveal()}
	}
	if id.Host == "" {
		id.Host = ep.Host
	}
	// Assert only an identity configured for the purpose (account, tenant
	// or trunk callerId), never a bare extension or a forwarded caller.
	if res.CallerID.Number != "" {
		pai := fmt.Sprintf("<sip:%s@%s>", headerSafe(id.User), id.Host)
		if n := headerSafe(id.DisplayName); n != "" {
			pai = strconv.Quote(n) + " " + pai
		}
		leg.Headers = append(leg.Headers, sip.NewHeader("P-Asserted-Identity", pai))
	}
	return leg, nil
}

// headerSafe drops what could break out of a header value.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\r', '\n', '"', '<', '>', '\\':
			return -1
		}
		return r
	}, s)
}

// stepLog keeps each live call's routing steps until its record is written.
type stepLog struct {
	mu sync.Mutex
	m  map[b2bua.CallID][]cdr.Step
}

func newStepLog() *stepLog { return &stepLog{m: map[b2bua.CallID][]cdr.Step{}} }

func (s *stepLog) put(id b2bua.CallID, steps []routing.Step) {
	now := time.Now()
	out := make([]cdr.Step, 0, len(steps))
	for i, st := range steps {
		out = append(out, cdr.Step{ID: strconv.Itoa(i + 1), Type: st.Type, Skipped: st.Skipped, At: now, Result: st.Result, Error: st.Error})
	}
	s.mu.Lock()
	s.m[id] = out
	s.mu.Unlock()
}

// addTransfer appends a transfer step (kind, by, to) and the routing steps
// of the transfer's new leg to call id's steps.
func (s *stepLog) addTransfer(id b2bua.CallID, t *b2bua.Transfer, steps []routing.Step) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.m[id]
	out = append(out, cdr.Step{ID: strconv.Itoa(len(out) + 1), Type: cdr.StepTransfer, At: now, Kind: t.Kind, By: t.By, To: t.To})
	for _, st := range steps {
		out = append(out, cdr.Step{ID: strconv.Itoa(len(out) + 1), Type: st.Type, Skipped: st.Skipped, At: now, Result: st.Result, Error: st.Error})
	}
	s.m[id] = out
}

// transferred records a transfer's outcome on its step, and on the steps
// of its new leg that have none (the dial that failed or answered). An
// attended transfer, which routes nothing, gets its step here.
func (s *stepLog) transferred(ev b2bua.Event) {
	t := ev.Transfer
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.m[ev.Call.ID]
	last := -1
	for i := range steps {
		if steps[i].Type == cdr.StepTransfer && steps[i].Result == "" {
			last = i
		}
	}
	if last < 0 {
		steps = append(steps, cdr.Step{ID: strconv.Itoa(len(steps) + 1), Type: cdr.StepTransfer, At: ev.At, Kind: t.Kind, By: t.By, To: t.To})
		last = len(steps) - 1
	}
	for i := last; i < len(steps); i++ {
		if steps[i].Result == "" {
			steps[i].Result = t.Result
		}
	}
	s.m[ev.Call.ID] = steps
}

// insertBeforeLast adds st before the last step of call id (the dial or
// ring group that created the far leg, which takes the call's outcome), or
// appends it when there is none, and renumbers the ids.
func (s *stepLog) insertBeforeLast(id b2bua.CallID, st cdr.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.m[id]
	at := max(len(steps)-1, 0)
	steps = append(steps[:at:at], append([]cdr.Step{st}, steps[at:]...)...)
	for i := range steps {
		steps[i].ID = strconv.Itoa(i + 1)
	}
	s.m[id] = steps
}

// get returns a copy of the steps of call id.
func (s *stepLog) get(id b2bua.CallID) []cdr.Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cdr.Step(nil), s.m[id]...)
}

// CallEvent forgets a call's steps once it ended; it runs after the call
// log among the observers.
func (s *stepLog) CallEvent(ev b2bua.Event) {
	if ev.Kind == b2bua.EventTransfer && ev.Transfer != nil {
		s.transferred(ev)
		return
	}
	if ev.Kind == b2bua.EventEnded {
		s.mu.Lock()
		delete(s.m, ev.Call.ID)
		s.mu.Unlock()
	}
}
