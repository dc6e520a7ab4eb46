package dialplan

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/logging"
	"pbx/appliance/mobile"
	"pbx/appliance/routing"
	"pbx/appliance/tenant"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// grantCaller identifies the room service bridge's INVITE by its call
// grant (X-Pbx-Token) alone, never by its source address: a live grant for
// the Request-URI's number makes the caller the app's account (Kind
// mobile); a missing, used, expired or mismatched one is refused with 403
// and counted as an authentication failure of no address.
func (r *Dialplan) grantCaller(req *sip.Request, src netip.AddrPort, tok string) (b2bua.Caller, bool, *b2bua.Rejection) {
	var g mobile.Grant
	err := errors.New("no room service")
	if r.mobile != nil {
		g, err = r.mobile.Authorise(tok, req.Recipient.User)
	}
	var a *tenant.Account
	if err == nil {
		if t := r.dir.Get(tenant.ID(g.Tenant)); t != nil {
			a = t.Accounts[g.Account]
		}
		if a == nil {
			err = fmt.Errorf("%w: account %s of tenant %s is gone", mobile.ErrGrant, g.Account, g.Tenant)
		}
	}
	if err != nil {
		if r.onGrantFailure != nil {
			r.onGrantFailure()
		}
		r.log.Info("call refused: bad call grant", "remote", src.String(), "to", req.Recipient.User, "err", err, logging.KindKey, "sip.call_refused")
		return b2bua.Caller{}, false, &b2bua.Rejection{Status: sip.StatusForbidden, Cause: calls.CauseRejected, Err: err}
	}
	return b2bua.Caller{Kind: b2bua.KindMobile, Tenant: g.Tenant, Username: a.Username, Extension: a.Extension, DisplayName: a.DisplayName}, true, nil
}

// mobileLegs are the extra fork legs toward the room service bridge for
// the devices of the extension called (none without devices or room
// service). The offer's room is created and each device's mobile.ringing
// webhook is on the wire before they are returned, so before any of their
// INVITEs leaves. Called on the INVITE's goroutine, holding no lock.
func (r *Dialplan) mobileLegs(ctx context.Context, in *b2bua.Inbound, res *routing.Result, id b2bua.Identity) []b2bua.LegTarget {
	if r.mobile == nil || in.Transfer != nil {
		return nil
	}
	legs := r.mobile.Offer(ctx, mobile.OfferRequest{Call: in.ID, Tenant: res.Tenant, Extension: res.Extension, CallerNumber: id.User, CallerName: id.DisplayName})
	for i := range legs {
		ep, err := r.sip.Endpoint(legs[i].Transport, legs[i].ListenerID)
		if err != nil {
			r.log.Warn("mobile leg without listener", "call", in.ID, "err", err)
			return nil
		}
		legs[i].Transport, legs[i].ListenerID = ep.Transport, ep.ListenerID
	}
	return legs
}
