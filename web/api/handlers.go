package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"

	"github.com/go-chi/chi/v5"
)

// Bodies of the list routes: every list is a named array, empty as [].
type (
	tenantList struct {
		Tenants []Tenant `json:"tenants"`
	}
	trunkList struct {
		Trunks []Trunk `json:"trunks"`
	}
	registrationList struct {
		Registrations []Registration `json:"registrations"`
	}
	callList struct {
		Calls []Call `json:"calls"`
	}
	banList struct {
		Bans []Ban `json:"bans"`
	}
)

// caller returns the authenticated principal; package web guarantees one on
// every route but health.
func caller(r *http.Request) (*Principal, error) {
	p := PrincipalFrom(r.Context())
	if p == nil {
		return nil, Internal(errors.New("no principal on an authenticated route"))
	}
	return p, nil
}

// param returns the decoded path parameter name. chi hands out the raw
// (still escaped) segment when the path had escapes.
func param(r *http.Request, name string) (string, error) {
	v, err := url.PathUnescape(chi.URLParam(r, name))
	if err != nil || v == "" {
		return "", NotFound("no such %s", name)
	}
	return v, nil
}

// tenantParams is the caller of a route under /{tenant}/{name}, with the
// two path parameters.
func tenantParams(r *http.Request, name string) (p *Principal, tenant, value string, err error) {
	if p, err = caller(r); err != nil {
		return nil, "", "", err
	}
	if tenant, err = param(r, "tenant"); err != nil {
		return nil, "", "", err
	}
	if value, err = param(r, name); err != nil {
		return nil, "", "", err
	}
	return p, tenant, value, nil
}

// nonNil turns a nil slice into an empty one so that it renders as [].
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request, _ Query) error {
	return WriteJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.Status == nil {
		return NotRunning("status")
	}
	snap, err := h.b.Status.Status(r.Context())
	if err != nil {
		return Internal(fmt.Errorf("status: %w", err))
	}
	st := Status{Version: snap.Version, StartedAt: snap.StartedAt, Problems: nonNil(snap.Problems), Degraded: len(snap.Problems) > 0}
	if !snap.StartedAt.IsZero() {
		st.UptimeS = int64(h.now().Sub(snap.StartedAt).Seconds())
	}
	for name, c := range snap.Tenants {
		if !p.SeesTenant(name) {
			continue
		}
		st.Tenants++
		st.CallsActive += c.CallsActive
		st.Registrations += c.Registrations
		st.Trunks.Up += c.TrunksUp
		st.Trunks.Down += c.TrunksDown
	}
	// Shared trunks are visible to every caller; unattributed calls and
	// registrations only to one that sees every tenant.
	st.Trunks.Up += snap.Shared.TrunksUp
	st.Trunks.Down += snap.Shared.TrunksDown
	if !p.Restricted() {
		st.CallsActive += snap.Shared.CallsActive
		st.Registrations += snap.Shared.Registrations
		st.Uploads = snap.Uploads
	}
	return WriteJSON(w, http.StatusOK, st)
}

func (h *Handler) visibleTenants(r *http.Request) ([]Tenant, error) {
	p, err := caller(r)
	if err != nil {
		return nil, err
	}
	if h.b.Tenants == nil {
		return nil, NotRunning("tenant directory")
	}
	all, err := h.b.Tenants.Tenants(r.Context())
	if err != nil {
		return nil, Internal(fmt.Errorf("tenants: %w", err))
	}
	out := make([]Tenant, 0, len(all))
	for _, t := range all {
		if p.SeesTenant(t.Name) {
			t.Extensions, t.DIDs = nonNil(t.Extensions), nonNil(t.DIDs)
			out = append(out, t)
		}
	}
	return out, nil
}

func (h *Handler) tenants(w http.ResponseWriter, r *http.Request, _ Query) error {
	ts, err := h.visibleTenants(r)
	if err != nil {
		return err
	}
	return WriteJSON(w, http.StatusOK, tenantList{ts})
}

func (h *Handler) tenant(w http.ResponseWriter, r *http.Request, _ Query) error {
	name, err := param(r, "tenant")
	if err != nil {
		return err
	}
	ts, err := h.visibleTenants(r)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.Name == name {
			return WriteJSON(w, http.StatusOK, t)
		}
	}
	return NotFound("no tenant %q", clip(name))
}

func (h *Handler) visibleTrunks(r *http.Request) ([]Trunk, error) {
	p, err := caller(r)
	if err != nil {
		return nil, err
	}
	if h.b.Trunks == nil {
		return nil, NotRunning("trunk manager")
	}
	all, err := h.b.Trunks.Trunks(r.Context())
	if err != nil {
		return nil, Internal(fmt.Errorf("trunks: %w", err))
	}
	out := make([]Trunk, 0, len(all))
	for _, t := range all {
		if p.Sees(t.Tenant) {
			t.Addresses = nonNil(t.Addresses)
			out = append(out, t)
		}
	}
	return out, nil
}

func (h *Handler) trunks(w http.ResponseWriter, r *http.Request, q Query) error {
	ts, err := h.visibleTrunks(r)
	if err != nil {
		return err
	}
	if tenant := q.String("tenant"); tenant != "" {
		// A tenant's trunks include the shared ones it may use.
		ts = slices.DeleteFunc(ts, func(t Trunk) bool { return t.Tenant != tenant && t.Tenant != "" })
	}
	return WriteJSON(w, http.StatusOK, trunkList{ts})
}

func (h *Handler) findTrunk(r *http.Request) (Trunk, error) {
	name, err := param(r, "name")
	if err != nil {
		return Trunk{}, err
	}
	ts, err := h.visibleTrunks(r)
	if err != nil {
		return Trunk{}, err
	}
	for _, t := range ts {
		if t.Name == name {
			return t, nil
		}
	}
	return Trunk{}, NotFound("no trunk %q", clip(name))
}

func (h *Handler) trunk(w http.ResponseWriter, r *http.Request, _ Query) error {
	t, err := h.findTrunk(r)
	if err != nil {
		return err
	}
	return WriteJSON(w, http.StatusOK, t)
}

func (h *Handler) refreshTrunk(w http.ResponseWriter, r *http.Request, _ Query) error {
	t, err := h.findTrunk(r)
	if err != nil {
		return err
	}
	if err := h.b.Trunks.Refresh(r.Context(), t.Name); err != nil {
		return wrapNotFound(err, "no trunk %q", t.Name)
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (h *Handler) registrations(w http.ResponseWriter, r *http.Request, q Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.Registrations == nil {
		return NotRunning("registrar")
	}
	online, err := q.Bool("online")
	if err != nil {
		return err
	}
	all, err := h.b.Registrations.Registrations(r.Context())
	if err != nil {
		return Internal(fmt.Errorf("registrations: %w", err))
	}
	tenant, ext, now := q.String("tenant"), q.String("extension"), h.now()
	out := make([]Registration, 0, len(all))
	for _, g := range all {
		switch {
		case !p.SeesTenant(g.Tenant) && p.Restricted():
		case tenant != "" && g.Tenant != tenant:
		case ext != "" && g.Extension != ext:
		case online != nil && g.Online(now) != *online:
		default:
			out = append(out, g)
		}
	}
	return WriteJSON(w, http.StatusOK, registrationList{out})
}

func (h *Handler) dropRegistration(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, tenant, ext, err := tenantParams(r, "extension")
	if err != nil {
		return err
	}
	if !p.SeesTenant(tenant) {
		return NotFound("no registration of %s in %s", clip(ext), clip(tenant))
	}
	if h.b.Registrations == nil {
		return NotRunning("registrar")
	}
	if err := h.b.Registrations.Drop(r.Context(), tenant, ext); err != nil {
		return wrapNotFound(err, "no registration of %s in %s", clip(ext), clip(tenant))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) visibleCalls(r *http.Request) ([]Call, error) {
	p, err := caller(r)
	if err != nil {
		return nil, err
	}
	if h.b.Calls == nil {
		return nil, NotRunning("call control")
	}
	all, err := h.b.Calls.Calls(r.Context())
	if err != nil {
		return nil, Internal(fmt.Errorf("calls: %w", err))
	}
	out := make([]Call, 0, len(all))
	for _, c := range all {
		if !p.Restricted() || p.SeesTenant(c.Tenant) {
			c.Legs = nonNil(c.Legs)
			out = append(out, c)
		}
	}
	return out, nil
}

func (h *Handler) calls(w http.ResponseWriter, r *http.Request, q Query) error {
	cs, err := h.visibleCalls(r)
	if err != nil {
		return err
	}
	if tenant := q.String("tenant"); tenant != "" {
		cs = slices.DeleteFunc(cs, func(c Call) bool { return c.Tenant != tenant })
	}
	return WriteJSON(w, http.StatusOK, callList{cs})
}

func (h *Handler) hangup(w http.ResponseWriter, r *http.Request, _ Query) error {
	id, err := param(r, "id")
	if err != nil {
		return err
	}
	cs, err := h.visibleCalls(r)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(cs, func(c Call) bool { return c.ID == id }) {
		return NotFound("no call %q in progress", clip(id))
	}
	if err := h.b.Calls.Hangup(r.Context(), id); err != nil {
		return wrapNotFound(err, "no call %q in progress", clip(id))
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (h *Handler) bans(w http.ResponseWriter, r *http.Request, _ Query) error {
	if h.b.Guard == nil {
		return NotRunning("security guard")
	}
	bs, err := h.b.Guard.Bans(r.Context())
	if err != nil {
		return Internal(fmt.Errorf("bans: %w", err))
	}
	return WriteJSON(w, http.StatusOK, banList{nonNil(bs)})
}

func (h *Handler) counters(w http.ResponseWriter, r *http.Request, _ Query) error {
	if h.b.Guard == nil {
		return NotRunning("security guard")
	}
	c, err := h.b.Guard.Counters(r.Context())
	if err != nil {
		return Internal(fmt.Errorf("counters: %w", err))
	}
	return WriteJSON(w, http.StatusOK, c)
}

func (h *Handler) liftBan(w http.ResponseWriter, r *http.Request, _ Query) error {
	raw, err := param(r, "ip")
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(raw)
	if err != nil || ip.Zone() != "" {
		return Invalid("%q is not an IP address", clip(raw))
	}
	if h.b.Guard == nil {
		return NotRunning("security guard")
	}
	if err := h.b.Guard.Lift(r.Context(), ip.Unmap()); err != nil {
		return wrapNotFound(err, "%s is not banned", ip.Unmap())
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) recordingAudio(w http.ResponseWriter, r *http.Request, _ Query) error {
	if h.presign {
		return Internal(errors.New("recording audio with api.recordings.presign set: presigned downloads are not available"))
	}
	return h.serveRecordingAudio(w, r)
}

// wrapNotFound turns a component's ErrNotFound into a 404 with message and
// anything else into a 500.
func wrapNotFound(err error, format string, args ...any) error {
	if errors.Is(err, ErrNotFound) {
		e := NotFound(format, args...)
		e.Err = err
		return e
	}
	return Internal(err)
}
