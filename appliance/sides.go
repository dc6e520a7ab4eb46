package appliance

import "pbx/sipcore/b2bua"

// side is one tenant's view of a call. A call has one side, its tenant's;
// an inter-tenant call (a phone calling another tenant's extension, ring
// group or number) has two: the callee's tenant (the call's Tenant, which
// routing chose) sees it as it sees any call delivered to it, and the
// caller's own tenant sees it as a call its extension placed. Both sides
// carry the call's id, so each tenant's record of the call is
// <dataDir>/<tenant>/cdr/.../<id>.json and GET /v1/cdr/{tenant}/{id} finds
// it with that tenant's token; both are internal calls (neither arrived nor
// left on a trunk) unless routing said otherwise.
type side struct {
	Tenant    string
	Extension string // the tenant's own extension on the call (called, or calling)
}

// sidesOf lists the tenants that see call c, its Tenant first; none for a
// call of no tenant.
func sidesOf(c *b2bua.CallInfo) []side {
	if c.Tenant == "" {
		return nil
	}
	out := []side{{Tenant: c.Tenant, Extension: c.Extension}}
	k := c.Caller.Kind // a phone, or an app calling through the room service
	if ct := c.Caller.Tenant; (k == b2bua.KindEndpoint || k == b2bua.KindMobile) && ct != "" && ct != c.Tenant {
		out = append(out, side{Tenant: ct, Extension: c.Caller.Extension})
	}
	return out
}
