package dialplan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/guard"
	"pbx/appliance/logging"
	"pbx/appliance/mobile"
	"pbx/appliance/moh"
	"pbx/appliance/recording"
	"pbx/appliance/routing"
	"pbx/appliance/tenant"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
	"pbx/sipcore/trunk"
)

// Dialplan decides where a new call goes (routing.Table) and turns the
// decision into the steps b2bua runs: the registered contacts of an
// extension or of a ring group's extensions, one INVITE to a trunk, or a
// local application (voicemail). It also identifies trunks by source
// address, and keeps each call's steps for its record.
type Dialplan struct {
	dir    *tenant.Directory
	table  *routing.Table
	reg    *registrar.Registrar
	sip    *sipcore.Server
	trunks *trunk.Manager
	limits *guard.Limiter // security.limits; nil means none
	steps  *Steps
	vm     Voicemail // nil: no voicemail
	log    *slog.Logger
	// nameFallback is the From display name when the caller has none
	// (sip.contactUser).
	nameFallback string
	// mobile makes the offers toward apps and checks call grants; nil
	// means no mobile app rings or calls.
	mobile *mobile.Service
	// onGrantFailure counts a refused call grant with the guard.
	onGrantFailure func()
}

// Voicemail is the mailbox service calls are handed to (appliance/voicemail).
type Voicemail interface {
	// Mailbox reports whether tenant's extension has a mailbox that takes
	// messages (voicemail on, a mailbox, the account's voicemail not off).
	Mailbox(tenant, extension string) bool
	// Deposit answers a call to take a message for the mailbox.
	Deposit(tenant, extension string) b2bua.App
	// Check runs the mailbox menu for caller: extension's mailbox, or the
	// one the caller names when extension is empty.
	Check(tenant, extension string, caller b2bua.Caller) b2bua.App
}

// Options are what a Dialplan routes with.
type Options struct {
	Config    *config.Config
	Directory *tenant.Directory
	Registrar *registrar.Registrar
	SIP       *sipcore.Server
	Trunks    *trunk.Manager
	Limits    *guard.Limiter // security.limits; nil means none
	Voicemail Voicemail      // nil: calls to voicemail are refused
	// Mobile makes the offers toward apps and checks call grants; nil: no
	// mobile app rings or calls.
	Mobile *mobile.Service
	// OnGrantFailure counts a refused call grant with the guard.
	OnGrantFailure func()
}

// New returns a dial plan over o.
func New(o Options, log *slog.Logger) *Dialplan {
	r := &Dialplan{dir: o.Directory, table: routing.New(o.Config), reg: o.Registrar, sip: o.SIP, trunks: o.Trunks,
		limits: o.Limits, steps: NewSteps(), vm: o.Voicemail, mobile: o.Mobile, onGrantFailure: o.OnGrantFailure, log: log}
	if cu := o.Config.System.SIP.ContactUser; cu != nil {
		r.nameFallback = *cu
	}
	return r
}

// Steps is the log of each live call's steps, for its record.
func (r *Dialplan) Steps() *Steps { return r.steps }

// Identify trusts an INVITE from a trunk's source address without a
// challenge. Any other INVITE must authenticate: it is challenged (407),
// unless neither its From host nor its Request-URI host is a tenant's
// domain, when no credentials could ever match and it is refused (403) at
// once. A request with credentials is left to digest; one with a
// room-service grant (X-Pbx-Token) is authorised by the grant alone.
func (r *Dialplan) Identify(req *sip.Request, src netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
	if h := req.GetHeader(mobile.HeaderGrant); h != nil {
		return r.grantCaller(req, src, h.Value())
	}
	if req.GetHeader("Proxy-Authorization") != nil || req.GetHeader("Authorization") != nil {
		return b2bua.Caller{}, false, nil
	}
	if tr, ok := r.trunks.Match(src.Addr(), req.Recipient.User); ok {
		return b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: tr.Tenant, Trunk: tr.Name}, true, nil
	}
	from := req.From()
	if from != nil && r.dir.ByDomain(from.Address.Host) == nil && r.dir.ByDomain(req.Recipient.Host) == nil {
		err := fmt.Errorf("INVITE from %s: no trunk has this address and neither %q nor %q is a tenant's domain", src, from.Address.Host, req.Recipient.Host)
		r.log.Info("call refused", "remote", src.String(), "to", req.Recipient.User, "err", err, logging.KindKey, "sip.call_refused")
		return b2bua.Caller{}, false, &b2bua.Rejection{Status: sip.StatusForbidden, Cause: calls.CauseRejected, Err: err}
	}
	return b2bua.Caller{}, false, nil
}

func (r *Dialplan) Route(ctx context.Context, in *b2bua.Inbound) b2bua.Decision {
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
	dec := r.decide(ctx, in, &res)
	if dec.Target != nil {
		r.presented(in, dec.Target)
	}
	if in.Transfer != nil {
		r.steps.AddTransfer(in.ID, in.Transfer, res.Steps)
	} else {
		r.steps.Put(in.ID, res.Steps)
	}
	return dec
}

// transferor completes the identity of a phone that transferred the call
// it answered (the b2bua knows its extension, not its account), so the
// transfer's new leg is routed as a call from that account.
func (r *Dialplan) transferor(in *b2bua.Inbound) {
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
func (r *Dialplan) dialled(in *b2bua.Inbound) []string {
	var nums []string
	ru := in.RequestURI.User
	if tr, ok := r.trunks.Trunk(in.Caller.Trunk); !ok || (ru != tr.ContactUser && ru != tr.Username) {
		nums = append(nums, ru)
	}
	return append(nums, in.To.User)
}

func (r *Dialplan) decide(ctx context.Context, in *b2bua.Inbound, res *routing.Result) b2bua.Decision {
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
	if res.Direction == calls.DirectionOutbound {
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
		target.Legs = append(target.Legs, r.mobileLegs(ctx, in, res, target.CallerID)...)
		if acct != nil {
			target.RingTimeout = acct.RingTimeout
		}
		if r.voicemailFor(res) {
			if len(target.Legs) == 0 {
				// No phone to ring: straight to the mailbox.
				r.failLast(res, "no registered phone")
				res.Steps = append(res.Steps, routing.Step{Type: routing.StepVoicemail})
				target.App = r.vm.Deposit(res.Tenant, res.Extension)
				return b2bua.Decision{Target: target}
			}
			target.Next = r.toVoicemail(in.ID, res.Tenant, res.Extension)
		}
		if len(target.Legs) == 0 {
			r.failLast(res, "no registered phone")
			return rejectWith(target, sip.StatusTemporarilyUnavailable, calls.CauseFailed,
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
			return rejectWith(target, sip.StatusTemporarilyUnavailable, calls.CauseFailed,
				fmt.Errorf("no extension of ring group %s of tenant %s has a registered phone", g.Name, res.Tenant))
		}
	case routing.KindVoicemail:
		if r.vm == nil || !r.vm.Mailbox(res.Tenant, res.Extension) {
			r.failLast(res, "voicemail is not available")
			// 480 rather than 404: the number exists, its mailbox does not
			// take messages; a carrier may try again or elsewhere.
			return rejectWith(target, sip.StatusTemporarilyUnavailable, calls.CauseFailed,
				fmt.Errorf("tenant %s: no mailbox takes messages for extension %s", res.Tenant, res.Extension))
		}
		target.App = r.vm.Deposit(res.Tenant, res.Extension)
	case routing.KindVoicemailCheck:
		if r.vm == nil || (res.Extension != "" && !r.vm.Mailbox(res.Tenant, res.Extension)) {
			r.failLast(res, "no mailbox")
			return rejectWith(target, sip.StatusNotFound, calls.CauseNoRoute,
				fmt.Errorf("tenant %s: no mailbox for %q", res.Tenant, res.Extension))
		}
		target.App = r.vm.Check(res.Tenant, res.Extension, caller)
	case routing.KindTrunk:
		leg, err := r.trunkLeg(res, &target.CallerID)
		if err != nil {
			r.failLast(res, err.Error())
			return rejectWith(target, sip.StatusServiceUnavailable, calls.CauseFailed, err)
		}
		target.Legs = []b2bua.LegTarget{leg}
	}
	return b2bua.Decision{Target: target}
}

// voicemailFor reports whether a call to res's extension falls back to
// its mailbox. A transfer's target does not: the transferee was not
// calling that mailbox.
func (r *Dialplan) voicemailFor(res *routing.Result) bool {
	return r.vm != nil && res.Kind == routing.KindExtension && r.vm.Mailbox(res.Tenant, res.Extension)
}

// toVoicemail is a dial's next step: a busy, unanswered or unreachable
// extension hands the caller to its mailbox, and the call record shows the
// dial's outcome, then the voicemail step.
func (r *Dialplan) toVoicemail(id b2bua.CallID, tn, ext string) func(context.Context, b2bua.Failure) *b2bua.Target {
	return func(_ context.Context, f b2bua.Failure) *b2bua.Target {
		switch f.Cause {
		case calls.CauseBusy, calls.CauseNoAnswer, calls.CauseFailed, calls.CauseRejected:
		default:
			return nil
		}
		r.steps.Next(id, string(f.Cause), cdr.Step{Type: routing.StepVoicemail, At: time.Now()})
		return &b2bua.Target{App: r.vm.Deposit(tn, ext)}
	}
}

// presented completes the caller identity once the legs are built (a
// trunk's P-Asserted-Identity asserts only a configured name): with no
// display name of its own the caller is presented as sip.contactUser. The
// call record names the caller as its extension (or number) and the name
// presented.
func (r *Dialplan) presented(in *b2bua.Inbound, t *b2bua.Target) {
	if t.CallerID.DisplayName == "" {
		t.CallerID.DisplayName = r.nameFallback
	}
	t.Meta.From, t.Meta.FromName = in.From.User, t.CallerID.DisplayName
	if k := in.Caller.Kind; (k == b2bua.KindEndpoint || k == b2bua.KindMobile) && in.Caller.Extension != "" {
		t.Meta.From = in.Caller.Extension
	}
}

// reserve takes the call's place under security.limits once the tenant is
// known; the Limiter gives it back when the call ends. A call that leaves on
// a trunk is outbound there, also when it arrived on one. A phone's
// per-account limit is its own tenant's, also when it calls another
// tenant. Concurrency limits answer 503 (the caller may try later),
// outbound rate and minutes limits 403.
func (r *Dialplan) reserve(in *b2bua.Inbound, res *routing.Result) *b2bua.Rejection {
	if r.limits == nil || res.Tenant == "" {
		return nil
	}
	claim := guard.Claim{Tenant: res.Tenant, Outbound: res.Kind == routing.KindTrunk}
	if k := in.Caller.Kind; k == b2bua.KindEndpoint || k == b2bua.KindMobile { // per-account limits apply to authenticated phones and apps
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
	return &b2bua.Rejection{Status: status, Cause: calls.CauseRejected, Err: err}
}

// rejectWith refuses the call and still hands b2bua the target's metadata
// (tenant, direction, did, trunk) for the call record.
func rejectWith(t *b2bua.Target, status int, cause calls.Cause, err error) b2bua.Decision {
	t.Legs = nil
	return b2bua.Decision{Reject: &b2bua.Rejection{Status: status, Cause: cause, Err: err}, Target: t}
}

// failLast marks the last step as failed when the legs cannot be built.
func (r *Dialplan) failLast(res *routing.Result, msg string) {
	if n := len(res.Steps); n > 0 {
		res.Steps[n-1].Result, res.Steps[n-1].Error = string(calls.CauseFailed), msg
	}
}

func (r *Dialplan) account(tn, ext string) *tenant.Account {
	t := r.dir.Get(tenant.ID(tn))
	if t == nil {
		return nil
	}
	return t.Extensions[ext]
}

// callerID is who callees see: a carrier's caller as it came in, a phone as
// its extension and display name (from its own tenant's domain), and on a
// trunk the identity routing chose.
func (r *Dialplan) callerID(in *b2bua.Inbound, res *routing.Result) b2bua.Identity {
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
func (r *Dialplan) trunkLeg(res *routing.Result, id *b2bua.Identity) (b2bua.LegTarget, error) {
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
