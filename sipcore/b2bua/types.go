package b2bua

import (
	"context"
	"crypto/rand"
	"net/netip"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/calls"
)

// CallID identifies a call (and its call record): a sortable UTC timestamp
// and a random suffix, e.g. 20261121T151230.123Z-k3j9q2ab.
type CallID string

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewCallID returns a fresh id for a call starting at t.
func NewCallID(t time.Time) CallID {
	var b [8]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return CallID(t.UTC().Format("20060102T150405.000Z") + "-" + string(b[:]))
}

// Reasons of a call the PBX ended itself, for the call record's reason
// field. The cause stays within the specification's list (an answered
// call ended this way is still answered), as with the minutes-budget cut.
const (
	// ReasonSessionExpired: the peer that should refresh a side's session
	// timer did not before the interval ended (RFC 4028 section 10).
	ReasonSessionExpired = "session timer expired"
	// ReasonSessionRefreshFailed: the PBX's own refresh timed out or got
	// 408 or 481 (RFC 4028 section 10).
	ReasonSessionRefreshFailed = "session refresh failed"
)

// Kinds of caller and leg.
const (
	KindEndpoint = "endpoint" // a registered phone
	KindTrunk    = "trunk"    // a carrier
	KindMobile   = "mobile"   // the room-service bridge
	// KindLocal is the leg of a call a local application answered
	// (Target.App): LegInfo.Target is the Target's Name.
	KindLocal = "local"
)

// Rejection says how an INVITE is answered; it is also the call record's
// cause.
type Rejection struct {
	Status int         // 4xx-6xx
	Cause  calls.Cause // no_route, busy, rejected, ...
	Err    error       // for the log; may be nil
}

// Caller is who sent a new INVITE, established by digest authentication or
// by Options.Identify.
type Caller struct {
	Kind        string // KindEndpoint, KindTrunk, KindMobile
	Tenant      string // empty for a trunk shared by all tenants
	Username    string // authenticated account, for endpoints
	Extension   string
	DisplayName string
	Trunk       string // trunk name, for trunks
}

// Inbound is what the Router sees of a new call.
type Inbound struct {
	ID         CallID
	SIPCallID  string
	Caller     Caller
	From       sip.Uri
	FromName   string
	To         sip.Uri
	RequestURI sip.Uri
	Source     netip.AddrPort
	Transport  string // "udp", "tcp"
	// Request is the INVITE; read-only (headers such as X-Pbx-Token).
	// For a transfer it is the REFER.
	Request *sip.Request
	// Transfer is set when the call is a transfer's new leg: route the
	// target as a call from the transferring party (Caller).
	Transfer *Transfer
}

// Identity is the caller identity presented to callees.
type Identity struct {
	User        string // From user part
	DisplayName string
	Host        string // From host; empty means the tenant domain or the PBX
}

// Meta is what the appliance wants carried on the call and its events.
type Meta struct {
	Tenant    string
	Direction calls.Direction
	Extension string // the extension called (or calling, outbound)
	DID       string
	Trunk     string
	Domain    string // tenant SIP domain, used as From/To host toward callees
	// Egress is KindTrunk when a leg leaves on a trunk (an outbound call,
	// or one forwarded to a carrier), whatever Direction says.
	Egress string
	// From and FromName name the caller on the call record: the calling
	// extension (or number) and the display name the PBX presented. Empty
	// From keeps the INVITE's From.
	From, FromName string
	Extra          map[string]string
}

// Credentials answer a callee's 401/407 (trunks, the room-service bridge).
type Credentials struct {
	Username string
	Password string
}

// LegTarget is one leg to fork to.
type LegTarget struct {
	URI         sip.Uri        // Request-URI (a registered Contact, a trunk URI)
	To          sip.Uri        // To header; zero means URI without parameters
	Destination netip.AddrPort // where packets go (NAT source, TCP connection)
	Transport   string         // "udp" or "tcp"
	ListenerID  string         // leave through this listener; empty: by Local or transport
	Local       netip.AddrPort // listener that received the registration, if known
	// Alternates are further places the INVITE may go, tried in order
	// when the one before gets no answer or 503 (a trunk's SRV targets,
	// RFC 3263 section 4.3). Used only with a Destination.
	Alternates []netip.AddrPort

	Kind      string // KindEndpoint, KindTrunk, KindMobile
	Name      string // target as shown on the call record ("101", a trunk name)
	Extension string // extension answering through this leg (answered_by)

	Delay   time.Duration // start this leg later (sequential ring groups)
	Timeout time.Duration // give up on this leg after this long; 0: the call's ring timeout

	Auth    *Credentials // answer a 401/407 from this target
	Headers []sip.Header // extra headers on the INVITE (X-Pbx-Token, ...)
}

// Target is where a call goes.
type Target struct {
	Legs        []LegTarget
	RingTimeout time.Duration // 0 means Options.RingTimeout
	CallerID    Identity
	Meta        Meta
	// App, when set, answers the call locally and runs it (app.go); Legs
	// must then be empty.
	App App
	// Name names the local application on the call record: the target of
	// its leg (kind KindLocal), e.g. "voicemail". Empty: "app". The
	// record's answered_by stays empty: no extension picked up.
	Name string
	// Next, when set, is asked after every leg failed (busy, no answer,
	// unavailable; never after the caller cancelled) what to do instead:
	// another Target (a dial, or an App such as voicemail) or nil to give
	// the caller the failure. It runs on the call's goroutine.
	Next func(ctx context.Context, f Failure) *Target
}

// Decision is the Router's answer: Reject refuses the call, else Target
// says where it goes. A Target given with a Reject is not dialled; only its
// Meta is kept, so the refused call's record still names its tenant,
// direction, DID and trunk.
type Decision struct {
	Reject *Rejection
	Target *Target
}

// Router decides where a new call goes. It runs on the INVITE's goroutine;
// ctx ends when the caller cancels.
type Router interface {
	Route(ctx context.Context, in *Inbound) Decision
}

// RouterFunc adapts a function to Router.
type RouterFunc func(ctx context.Context, in *Inbound) Decision

// Route calls f.
func (f RouterFunc) Route(ctx context.Context, in *Inbound) Decision { return f(ctx, in) }

// IdentifyFunc classifies a new INVITE before authentication. It returns
// trusted=true with the caller when the request needs no digest challenge
// (a trunk matched by source address, the room-service bridge with a valid
// grant), or ok=false to challenge. A non-nil Rejection refuses the request
// outright.
type IdentifyFunc func(req *sip.Request, src netip.AddrPort) (caller Caller, trusted bool, reject *Rejection)

// LegInfo is one leg's outcome (the call record's legs[]).
type LegInfo struct {
	Target    string      `json:"target"`
	Kind      string      `json:"kind"`
	Extension string      `json:"extension,omitempty"`
	Start     time.Time   `json:"start"`
	Answer    time.Time   `json:"answer,omitzero"`
	End       time.Time   `json:"end,omitzero"`
	SIPStatus int         `json:"sip_status"`
	Won       bool        `json:"won"`
	Cause     calls.Cause `json:"cause"`
	SIPCallID string      `json:"call_id,omitempty"`
}

// States of a call.
const (
	StateRouting  = "routing"
	StateRinging  = "ringing"
	StateAnswered = "answered"
	StateEnded    = "ended"
)

// CallInfo is a snapshot of a call.
type CallInfo struct {
	ID         CallID          `json:"id"`
	Tenant     string          `json:"tenant"`
	Direction  calls.Direction `json:"direction"`
	SIPCallID  string          `json:"call_id"`
	DialogID   string          `json:"dialog_id"`
	From       string          `json:"from"`
	FromName   string          `json:"from_name"`
	To         string          `json:"to"`
	DID        string          `json:"did,omitempty"`
	Trunk      string          `json:"trunk,omitempty"`
	Extension  string          `json:"extension,omitempty"`
	Source     string          `json:"source"`
	Caller     Caller          `json:"-"`
	Meta       Meta            `json:"-"`
	State      string          `json:"state"`
	Start      time.Time       `json:"started_at"`
	Answer     time.Time       `json:"answered_at,omitzero"`
	End        time.Time       `json:"end,omitzero"`
	Cause      calls.Cause     `json:"cause,omitempty"`
	SIPStatus  int             `json:"sip_status,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	AnsweredBy string          `json:"answered_by,omitempty"`
	Held       bool            `json:"held,omitempty"` // on hold (a sendonly or inactive offer or answer)
	Legs       []LegInfo       `json:"legs"`
	// Digits are the DTMF digits the caller sent once answered, as RFC
	// 4733 events or SIP INFO (the call record's digits).
	Digits []Digit `json:"-"`
}

// Calling names the caller as the call record shows it: Meta.From and
// Meta.FromName when the Router set them (the calling extension or number,
// the display name presented), else the INVITE's From.
func (c *CallInfo) Calling() (from, name string) {
	if c.Meta.From != "" {
		return c.Meta.From, c.Meta.FromName
	}
	return c.From, c.FromName
}

// EventKind names a call event.
type EventKind string

// Call events.
const (
	EventCreated  EventKind = "created"
	EventRinging  EventKind = "ringing"
	EventAnswered EventKind = "answered"
	EventLegEnded EventKind = "leg_ended"
	EventHeld     EventKind = "held"    // a party put the call on hold
	EventResumed  EventKind = "resumed" // the hold ended
	EventEnded    EventKind = "ended"
)

// Event is delivered to the Observer. Call is a snapshot taken when the
// event happened; Leg is set for EventLegEnded (and for EventAnswered: the
// winning leg).
type Event struct {
	Kind EventKind
	At   time.Time
	Call CallInfo
	Leg  *LegInfo
	// Media is the call's media session (for taps: recording, voicemail);
	// set on created and answered events.
	Media MediaAccess
	// Transfer is set for EventTransfer.
	Transfer *Transfer
}

// Observer receives call events synchronously on the call's goroutine.
// Implementations must be quick and must not call back into the Manager
// for the same call.
type Observer interface {
	CallEvent(ev Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ev Event)

// CallEvent calls f.
func (f ObserverFunc) CallEvent(ev Event) { f(ev) }

// SIP statuses sipgo does not name.
const (
	statusBusyEverywhere = 600
	statusDecline        = 603
)
