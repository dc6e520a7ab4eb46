package api

import (
	"fmt"
	"net/http"
	"time"

	"pbx/appliance/cdr"
	"pbx/sipcore/calls"
)

// CDRQuery turns a checked query string into a call-log query for p: the
// caller's tenants always bound the query, whatever ?tenant= says.
func CDRQuery(q Query, p *Principal) (cdr.Query, error) {
	var out cdr.Query
	var err error
	if out.From, out.To, err = timeRange(q); err != nil {
		return out, err
	}
	dir, err := q.OneOf("direction", string(calls.DirectionInbound), string(calls.DirectionOutbound), string(calls.DirectionInternal))
	if err != nil {
		return out, err
	}
	out.Direction = calls.Direction(dir)
	if out.Answered, err = q.Bool("answered"); err != nil {
		return out, err
	}
	if out.Limit, err = q.Limit(cdr.DefaultLimit, cdr.MaxLimit); err != nil {
		return out, err
	}
	if out.Tenant, out.Tenants, err = tenantScope(q, p); err != nil {
		return out, err
	}
	out.Number = q.String("number")
	out.Trunk = q.String("trunk")
	out.Extension = q.String("extension")
	out.Cursor = q.String("cursor")
	return out, nil
}

// timeRange reads a listing's from and to, to not before from.
func timeRange(q Query) (from, to *time.Time, err error) {
	if from, err = q.Time("from"); err != nil {
		return nil, nil, err
	}
	if to, err = q.Time("to"); err != nil {
		return nil, nil, err
	}
	if from != nil && to != nil && to.Before(*from) {
		return nil, nil, Invalid("to is before from")
	}
	return from, to, nil
}

// tenantScope reads a listing's ?tenant= and bounds it by p's tenants: the
// tenants a restricted caller may see always limit the listing, and a
// tenant outside them is forbidden.
func tenantScope(q Query, p *Principal) (tenant string, tenants []string, err error) {
	tenant = q.String("tenant")
	if tenant != "" && cdr.ValidateTenant(tenant) != nil {
		return "", nil, Invalid("tenant: %q is not a tenant name", clip(tenant))
	}
	if p != nil && p.Restricted() {
		if tenant != "" && !p.SeesTenant(tenant) {
			return "", nil, Forbidden("tenant %q is outside this token's tenants", clip(tenant))
		}
		tenants = append([]string(nil), p.Tenants...)
	}
	return tenant, tenants, nil
}

func (h *Handler) cdrList(w http.ResponseWriter, r *http.Request, q Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.CallLog == nil {
		return NotRunning("call log")
	}
	cq, err := CDRQuery(q, p)
	if err != nil {
		return err
	}
	page, err := h.b.CallLog.List(r.Context(), cq)
	if err != nil {
		return err
	}
	page.Records = visible(p, page.Records, func(e cdr.Entry) string { return e.Tenant })
	return WriteJSON(w, http.StatusOK, page)
}

func (h *Handler) cdrGet(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, tenant, id, err := tenantParams(r, "id")
	if err != nil {
		return err
	}
	if h.b.CallLog == nil {
		return NotRunning("call log")
	}
	notFound := NotFound("no call record %q in %q", clip(id), clip(tenant))
	if !p.SeesTenant(tenant) || cdr.ValidateTenant(tenant) != nil || cdr.ID(id).Validate() != nil {
		return notFound
	}
	rec, err := h.b.CallLog.Get(r.Context(), tenant, cdr.ID(id))
	if err != nil {
		if classify(err).Status == http.StatusNotFound {
			notFound.Err = err
			return notFound
		}
		return Internal(fmt.Errorf("call record %s/%s: %w", tenant, id, err))
	}
	if rec == nil || rec.Tenant != tenant || !p.SeesTenant(rec.Tenant) {
		return notFound
	}
	rec.Steps, rec.Legs, rec.Digits = nonNil(rec.Steps), nonNil(rec.Legs), nonNil(rec.Digits)
	return WriteJSON(w, http.StatusOK, rec)
}
