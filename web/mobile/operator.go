package mobile

import (
	"context"
	"errors"

	amobile "pbx/appliance/mobile"
	"pbx/web/api"
)

// Operator serves the operator routes (GET /v1/mobile/devices, DELETE
// /v1/mobile/devices/{tenant}/{deviceId}) from the device sessions.
func Operator(s *amobile.Sessions) api.DeviceSource { return operator{s} }

type operator struct{ s *amobile.Sessions }

func (o operator) Devices(context.Context) ([]api.Device, error) {
	all, err := o.s.List()
	if err != nil {
		return nil, err
	}
	out := make([]api.Device, 0, len(all))
	for _, se := range all {
		d := se.Device
		out = append(out, api.Device{Tenant: d.Tenant, ID: d.ID, Platform: d.Platform, Push: d.Push,
			Account: d.Account, Extension: d.Extension, CreatedAt: se.CreatedAt.UTC(), ExpiresAt: se.ExpiresAt.UTC()})
	}
	return out, nil
}

func (o operator) Revoke(_ context.Context, tenant, deviceID string) error {
	err := o.s.Revoke(tenant, deviceID)
	if errors.Is(err, amobile.ErrNoSession) {
		return api.ErrNotFound
	}
	return err
}
