package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Device is one entry of GET /v1/mobile/devices: a device session, never
// its token.
type Device struct {
	Tenant    string          `json:"tenant"`
	ID        string          `json:"id"`
	Platform  string          `json:"platform"`
	Push      json.RawMessage `json:"push"`
	Account   string          `json:"account"`
	Extension string          `json:"extension"`
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt time.Time       `json:"expires_at"`
}

// DeviceSource lists the device sessions and revokes one.
type DeviceSource interface {
	Devices(ctx context.Context) ([]Device, error)
	// Revoke deletes the sessions of deviceID in tenant; ErrNotFound when
	// there is none.
	Revoke(ctx context.Context, tenant, deviceID string) error
}

func (h *Handler) mobileDevices(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, err := caller(r)
	if err != nil {
		return err
	}
	if h.b.Devices == nil {
		return NotRunning("mobile")
	}
	all, err := h.b.Devices.Devices(r.Context())
	if err != nil {
		return Internal(err)
	}
	out := make([]Device, 0, len(all))
	for _, d := range all {
		if p.SeesTenant(d.Tenant) {
			out = append(out, d)
		}
	}
	return WriteJSON(w, http.StatusOK, map[string][]Device{"devices": out})
}

func (h *Handler) revokeDevice(w http.ResponseWriter, r *http.Request, _ Query) error {
	p, tenant, id, err := tenantParams(r, "deviceId")
	if err != nil {
		return err
	}
	if h.b.Devices == nil {
		return NotRunning("mobile")
	}
	if !p.SeesTenant(tenant) {
		return NotFound("no device %q in %q", clip(id), clip(tenant))
	}
	if err := h.b.Devices.Revoke(r.Context(), tenant, id); err != nil {
		return wrapNotFound(err, "no device %q in %q", clip(id), clip(tenant))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
