package api

import (
	"context"
	"errors"
	"io"
	"net/netip"

	"pbx/appliance/cdr"
	"pbx/appliance/recording"
)

// ErrNotFound is what a component returns for an id it does not know; the
// API answers 404 not_found.
var ErrNotFound = errors.New("not found")

// StatusSource reports process status with per-tenant counts.
type StatusSource interface {
	Status(ctx context.Context) (StatusSnapshot, error)
}

// TenantSource lists the configured tenants.
type TenantSource interface {
	Tenants(ctx context.Context) ([]Tenant, error)
}

// TrunkSource lists trunks and refreshes one: re-registers it and
// re-discovers its addresses in the background.
type TrunkSource interface {
	Trunks(ctx context.Context) ([]Trunk, error)
	// Refresh starts a refresh of the named trunk and returns at once;
	// ErrNotFound for an unknown trunk.
	Refresh(ctx context.Context, name string) error
}

// RegistrationSource lists location bindings and drops them.
type RegistrationSource interface {
	Registrations(ctx context.Context) ([]Registration, error)
	// Drop removes every binding of the extension of tenant; ErrNotFound
	// when there is none.
	Drop(ctx context.Context, tenant, extension string) error
}

// CallSource lists calls in progress and hangs one up.
type CallSource interface {
	Calls(ctx context.Context) ([]Call, error)
	// Hangup starts ending the call (the BYE is sent in the background)
	// and returns at once; ErrNotFound for a call that is not in progress.
	Hangup(ctx context.Context, id string) error
}

// Guard is the security guard: bans, counters, and lifting a ban.
type Guard interface {
	Bans(ctx context.Context) ([]Ban, error)
	Counters(ctx context.Context) (Counters, error)
	// Lift removes the ban of ip; ErrNotFound when ip is not banned.
	Lift(ctx context.Context, ip netip.Addr) error
}

// CallLog lists and reads call records. *cdr.Store implements it.
type CallLog interface {
	List(ctx context.Context, q cdr.Query) (cdr.Page, error)
	Get(ctx context.Context, tenant string, id cdr.ID) (*cdr.Record, error)
}

// RecordingSource lists, reads and opens recordings. *recording.Store
// implements it; errors follow the call log's (cdr.ErrNotFound, ...).
type RecordingSource interface {
	List(ctx context.Context, q recording.Query) (recording.Page, error)
	Get(ctx context.Context, tenant, id string) (*recording.Sidecar, error)
	// Open returns the audio (a WAV) with its sidecar; the caller closes it.
	Open(ctx context.Context, tenant, id string) (io.ReadSeekCloser, *recording.Sidecar, error)
}

// Backends are the components the handlers consume. A nil field means the
// component is not running.
type Backends struct {
	Status        StatusSource
	Tenants       TenantSource
	Trunks        TrunkSource
	Registrations RegistrationSource
	Calls         CallSource
	Guard         Guard
	CallLog       CallLog
	Events        EventSource
	Media         MediaSource
	SIP           SIPSource
	CallLogStats  CallLogStatsSource
	Recordings    RecordingSource // nil unless recording is on somewhere
	Voicemail     VoicemailSource // nil unless a tenant has mailboxes
	Devices       DeviceSource    // nil without a data directory
	Webhooks      WebhookStatsSource
}
