package api

import (
	"fmt"
	"net/http"

	"pbx/appliance/cdr"
	"pbx/appliance/recording"
)

// RecordingQuery turns a checked query string into a recordings query for
// p: the caller's tenants always bound it, whatever ?tenant= says.
func RecordingQuery(q Query, p *Principal) (recording.Query, error) {
	var out recording.Query
	var err error
	if out.From, out.To, err = timeRange(q); err != nil {
		return out, err
	}
	if out.Limit, err = q.Limit(cdr.DefaultLimit, cdr.MaxLimit); err != nil {
		return out, err
	}
	if out.Tenant, out.Tenants, err = tenantScope(q, p); err != nil {
		return out, err
	}
	out.Number = q.String("number")
	out.Extension = q.String("extension")
	out.Cursor = q.String("cursor")
	return out, nil
}

func (h *Handler) recordings(w http.ResponseWriter, r *http.Request, q Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.Recordings == nil {
		return NotRunning("recording")
	}
	rq, err := RecordingQuery(q, p)
	if err != nil {
		return err
	}
	page, err := h.b.Recordings.List(r.Context(), rq)
	if err != nil {
		return err
	}
	page.Recordings = visible(p, page.Recordings, func(sc recording.Sidecar) string { return sc.Tenant })
	return WriteJSON(w, http.StatusOK, page)
}

// recordingTarget reads {tenant} and {id} and checks that p may see them;
// anything else is the same 404 as an unknown recording.
func (h *Handler) recordingTarget(r *http.Request) (tenant, id string, err error) {
	p, err := caller(r)
	if err != nil {
		return "", "", err
	}
	if tenant, err = param(r, "tenant"); err != nil {
		return "", "", err
	}
	if id, err = param(r, "id"); err != nil {
		return "", "", err
	}
	if h.b.Recordings == nil {
		return "", "", NotRunning("recording")
	}
	if !p.SeesTenant(tenant) || cdr.ValidateTenant(tenant) != nil || cdr.ID(id).Validate() != nil {
		return "", "", NotFound("no recording %q in %q", clip(id), clip(tenant))
	}
	return tenant, id, nil
}

// recordingError maps a store error: not found is 404, anything else 500.
func recordingError(err error, tenant, id string) error {
	if classify(err).Status == http.StatusNotFound {
		e := NotFound("no recording %q in %q", clip(id), clip(tenant))
		e.Err = err
		return e
	}
	return Internal(fmt.Errorf("recording %s/%s: %w", tenant, id, err))
}

func (h *Handler) recordingGet(w http.ResponseWriter, r *http.Request, _ Query) error {
	tenant, id, err := h.recordingTarget(r)
	if err != nil {
		return err
	}
	sc, err := h.b.Recordings.Get(r.Context(), tenant, id)
	if err != nil {
		return recordingError(err, tenant, id)
	}
	if sc == nil || sc.Tenant != tenant {
		return NotFound("no recording %q in %q", clip(id), clip(tenant))
	}
	return WriteJSON(w, http.StatusOK, sc)
}

// serveRecordingAudio streams the WAV with Range requests (206 and
// Content-Range, 416 when unsatisfiable) and an ETag from the sha256 for
// If-None-Match.
func (h *Handler) serveRecordingAudio(w http.ResponseWriter, r *http.Request) error {
	tenant, id, err := h.recordingTarget(r)
	if err != nil {
		return err
	}
	f, sc, err := h.b.Recordings.Open(r.Context(), tenant, id)
	if err != nil {
		return recordingError(err, tenant, id)
	}
	defer f.Close()
	if sc == nil || sc.Tenant != tenant {
		return NotFound("no recording %q in %q", clip(id), clip(tenant))
	}
	serveAudio(w, r, id+".wav", sc.SHA256, sc.End, f)
	return nil
}
