package mobile

import (
	"encoding/json"
	"time"
)

// Device is one logged-in app on an extension: what the device sessions
// store knows of it. Push is opaque (stored and returned as the app gave it).
type Device struct {
	ID        string          `json:"id"`
	Platform  string          `json:"platform"` // "ios" or "android"
	Push      json.RawMessage `json:"push"`
	Tenant    string          `json:"-"`
	Account   string          `json:"-"` // account username
	Extension string          `json:"-"`
}

// Devices lists the devices with a live session on an extension. The
// device sessions store implements it; it must be quick (called while a
// call is being routed) and safe for concurrent use.
type Devices interface {
	Devices(tenant, extension string) []Device
}

// Webhooks delivers events to a tenant's backend. Send returns once the
// request for a mobile.ringing event is on the wire (or failed); other
// events may be queued. It returns an error when the tenant has no
// endpoint for the event or delivery could not start.
type Webhooks interface {
	Send(tenant, event string, data any) error
}

// Webhook events the mobile offer sends.
const (
	EventRinging = "mobile.ringing"
	EventEnded   = "mobile.ended"
)

// Outcomes of a mobile offer (mobile.ended's outcome).
const (
	OutcomeAnsweredElsewhere = "answered_elsewhere"
	OutcomeCallerCancelled   = "caller_cancelled"
	OutcomeNoAnswer          = "no_answer"
	OutcomeFailed            = "failed"
)

// Call is what an app needs to join the room of a call it placed:
// POST /v1/mobile/calls answers 202 {call: Call}.
type Call struct {
	Room      string    `json:"room"`
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	To        string    `json:"to"`
	ExpiresAt time.Time `json:"expires_at"`
}

// JoinToken is a fresh join token for a room:
// POST /v1/mobile/roomservice/token answers it.
type JoinToken struct {
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}
