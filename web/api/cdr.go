package api

import (
	"fmt"
	"net/http"

	"pbx/appliance/cdr"
)

// CDRQuery turns a checked query string into a call-log query for p: the
// caller's tenants always bound the query, whatever ?tenant= says.
func CDRQuery(q Query, p *Principal) (cdr.Query, error) {
	var out cdr.Query
	var err error
	if out.From, err = q.Time("from"); err != nil {
		return out, err
	}
	if out.To, err = q.Time("to"); err != nil {
		return out, err
	}
	if out.From != nil && out.To != nil && out.To.Before(*out.From) {
		return out, Invalid("to is before from")
	}
	dir, err := q.OneOf("direction", string(cdr.Inbound), string(cdr.Outbound), string(cdr.Internal))
	if err != nil {
		return out, err
	}
	out.Direction = cdr.Direction(dir)
	if out.Answered, err = q.Bool("answered"); err != nil {
		return out, err
	}
	if out.Limit, err = q.Limit(cdr.DefaultLimit, cdr.MaxLimit); err != nil {
		return out, err
	}
	out.Tenant = q.String("tenant")
	if out.Tenant != "" && cdr.ValidateTenant(out.Tenant) != nil {
		return out, Invalid("tenant: %q is not a tenant name", clip(out.Tenant))
	}
	out.Number = q.String("number")
	out.Trunk = q.String("trunk")
	out.Extension = q.String("extension")
	out.Cursor = q.String("cursor")
	if p != nil && p.Restricted() {
		out.Tenants = append([]string(nil), p.Tenants...)
		if out.Tenant != "" && !p.SeesTenant(out.Tenant) {
			return out, Forbidden("tenant %q is outside this token's tenants", clip(out.Tenant))
		}
	}
	return out, nil
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
	// Filter every row again: the store is asked for the caller's tenants
	// only, and nothing else may leave here even if it answers more.
	recs := make([]cdr.Entry, 0, len(page.Records))
	for _, e := range page.Records {
		if !p.Restricted() || p.SeesTenant(e.Tenant) {
			recs = append(recs, e)
		}
	}
	page.Records = recs
	return WriteJSON(w, http.StatusOK, page)
}

func (h *Handler) cdrGet(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	tenant, err := param(r, "tenant")
	if err != nil {
		return err
	}
	id, err := param(r, "id")
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
