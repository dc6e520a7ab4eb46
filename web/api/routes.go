package api

import (
	"log/slog"
	"net/http"
	"time"
)

// Scopes of operator tokens, as the specification's Scopes table lists.
const (
	ScopeStatus          = "status:read"
	ScopeCDR             = "cdr:read"
	ScopeRecordings      = "recordings:read"
	ScopeVoicemail       = "voicemail:read"
	ScopeVoicemailDelete = "voicemail:delete"
	ScopeSecurity        = "security:read"
	ScopeMobileRead      = "mobile:read"
	ScopeMobileManage    = "mobile:manage"
	ScopeOperate         = "operate"
)

// HandlerFunc serves one route. It returns errors to the one renderer
// (WriteError) instead of writing them itself; q is the checked query.
type HandlerFunc func(w http.ResponseWriter, r *http.Request, q Query) error

// Route is one management API route.
type Route struct {
	// Method is GET, POST or DELETE. A GET route also answers HEAD.
	Method string
	// Pattern is the chi pattern under the resource prefix ("/" for the
	// resource itself).
	Pattern string
	// Scope the token must grant; empty only for /v1/health, which is
	// served without authentication.
	Scope string
	// Query lists the accepted query parameters; any other is 400.
	Query []string
	// Global marks process-global data (the guard): 403 for a
	// tenant-scoped token whatever its scopes.
	Global bool
	// Action names an operator action; each one writes an audit log line
	// naming the token.
	Action string
	Handle HandlerFunc
}

// Resource is a group of routes under one prefix below /v1.
type Resource struct {
	Prefix string
	Routes []Route
}

// Options configures the handlers.
type Options struct {
	Backends Backends
	// Presign is api.recordings.presign: every recording audio request
	// answers 500.
	Presign bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Closing ends every event stream when it is closed (the server is
	// shutting down); nil: streams end only with their requests.
	Closing <-chan struct{}
	// Heartbeat is the period of an event stream's heartbeat comment; 0:
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// Metrics serves GET /v1/metrics; nil: not running.
	Metrics http.Handler
}

// Handler serves the management API routes.
type Handler struct {
	b              Backends
	presign        bool
	now            func() time.Time
	log            *slog.Logger
	closing        <-chan struct{}
	heartbeat      time.Duration
	streams        streams
	metricsHandler http.Handler
}

// New returns the handlers over opts.
func New(opts Options) *Handler {
	h := &Handler{b: opts.Backends, presign: opts.Presign, now: opts.Now, log: opts.Log, closing: opts.Closing}
	if h.now == nil {
		h.now = time.Now
	}
	h.metricsHandler = opts.Metrics
	h.heartbeat = opts.Heartbeat
	if h.heartbeat <= 0 {
		h.heartbeat = DefaultHeartbeat
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h
}

// Query parameters accepted per route (the specification's table).
var (
	cdrParams          = []string{"tenant", "from", "to", "direction", "number", "answered", "trunk", "extension", "cursor", "limit"}
	recordingParams    = []string{"tenant", "from", "to", "extension", "number", "cursor", "limit"}
	voicemailParams    = []string{"tenant", "extension"}
	registrationParams = []string{"tenant", "extension", "online"}
	tenantParam        = []string{"tenant"}
)

// Resources returns every route of the management API grouped by
// resource. Package web mounts them under /v1.
func (h *Handler) Resources() []Resource {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	return []Resource{
		{"/health", []Route{
			{Method: get, Pattern: "/", Handle: h.health},
		}},
		{"/status", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Handle: h.status},
		}},
		{"/tenants", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Handle: h.tenants},
			{Method: get, Pattern: "/{tenant}", Scope: ScopeStatus, Handle: h.tenant},
		}},
		{"/trunks", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Query: tenantParam, Handle: h.trunks},
			{Method: get, Pattern: "/{name}", Scope: ScopeStatus, Handle: h.trunk},
			{Method: post, Pattern: "/{name}/refresh", Scope: ScopeOperate, Action: "trunk.refresh", Handle: h.refreshTrunk},
		}},
		{"/registrations", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Query: registrationParams, Handle: h.registrations},
			{Method: del, Pattern: "/{tenant}/{extension}", Scope: ScopeOperate, Action: "registration.drop", Handle: h.dropRegistration},
		}},
		{"/calls", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Query: tenantParam, Handle: h.calls},
			{Method: post, Pattern: "/{id}/hangup", Scope: ScopeOperate, Action: "call.hangup", Handle: h.hangup},
		}},
		{"/metrics", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Global: true, Handle: h.metrics},
		}},
		{"/events", []Route{
			{Method: get, Pattern: "/", Scope: ScopeStatus, Handle: h.eventStream},
		}},
		{"/cdr", []Route{
			{Method: get, Pattern: "/", Scope: ScopeCDR, Query: cdrParams, Handle: h.cdrList},
			{Method: get, Pattern: "/{tenant}/{id}", Scope: ScopeCDR, Handle: h.cdrGet},
		}},
		{"/recordings", []Route{
			{Method: get, Pattern: "/", Scope: ScopeRecordings, Query: recordingParams, Handle: h.recordings},
			{Method: get, Pattern: "/{tenant}/{id}", Scope: ScopeRecordings, Handle: h.recordingGet},
			{Method: get, Pattern: "/{tenant}/{id}/audio", Scope: ScopeRecordings, Handle: h.recordingAudio},
		}},
		{"/voicemail", []Route{
			{Method: get, Pattern: "/", Scope: ScopeVoicemail, Query: voicemailParams, Handle: h.voicemailList},
			{Method: get, Pattern: "/{tenant}/{extension}/{id}", Scope: ScopeVoicemail, Handle: h.voicemailGet},
			{Method: get, Pattern: "/{tenant}/{extension}/{id}/audio", Scope: ScopeVoicemail, Handle: h.voicemailAudio},
			{Method: del, Pattern: "/{tenant}/{extension}/{id}", Scope: ScopeVoicemailDelete, Action: "voicemail.delete", Handle: h.voicemailDelete},
		}},
		{"/security", []Route{
			{Method: get, Pattern: "/bans", Scope: ScopeSecurity, Global: true, Handle: h.bans},
			{Method: get, Pattern: "/counters", Scope: ScopeSecurity, Global: true, Handle: h.counters},
			{Method: del, Pattern: "/bans/{ip}", Scope: ScopeOperate, Global: true, Action: "ban.lift", Handle: h.liftBan},
		}},
		{"/mobile", []Route{
			{Method: get, Pattern: "/devices", Scope: ScopeMobileRead, Handle: h.mobileDevices},
			{Method: del, Pattern: "/devices/{tenant}/{deviceId}", Scope: ScopeMobileManage, Action: "mobile.device.revoke", Handle: h.revokeDevice},
		}},
	}
}
