package routing

import (
	"pbx/appliance/config"
	"pbx/sipcore/calls"
)

// Kind says what a Result delivers.
type Kind string

// Kinds of Result.
const (
	KindExtension Kind = "extension"  // ring an extension's registered phones
	KindRingGroup Kind = "ring_group" // ring a ring group's extensions
	KindTrunk     Kind = "trunk"      // send the call out on a trunk
	KindReject    Kind = "reject"     // answer with Status
	// KindVoicemail deposits a message into Extension's mailbox.
	KindVoicemail Kind = "voicemail"
	// KindVoicemailCheck runs the mailbox menu: Extension's mailbox (the
	// caller's own, dialled with featureCodes.voicemail), or the one the
	// caller names when Extension is empty (featureCodes.voicemailOther).
	KindVoicemailCheck Kind = "voicemail_check"
)

// Step types written to a call record's steps[].
const (
	StepRoute     = "route"
	StepDial      = "dial"
	StepRingGroup = "ring_group"
	StepVoicemail = "voicemail"
	// StepVoicemailCheck is a caller in a mailbox menu; its digits (the
	// PIN) are never written to the call record.
	StepVoicemailCheck = "voicemail_check"
	StepHangup         = "hangup"
	StepExternal       = "external"
	StepRecord         = "record" // the recording policy's decision, at answer
)

// Result is a routing decision.
type Result struct {
	Kind      Kind
	Direction calls.Direction
	// Tenant handles the call: the callee's tenant for inbound and
	// inter-tenant calls, the caller's for outbound ones. Empty when no
	// tenant could be told (an unknown number on a shared trunk).
	Tenant string
	// Domain is Tenant's SIP domain.
	Domain string
	DID    string

	Extension string            // KindExtension
	RingGroup *config.RingGroup // KindRingGroup

	Trunk    *config.Trunk   // KindTrunk
	Number   string          // KindTrunk: the number sent, after strip and prepend
	CallerID config.CallerID // KindTrunk: the identity presented on an outbound call

	Status int         // KindReject: 4xx-6xx
	Cause  calls.Cause // KindReject: calls.CauseNoRoute, calls.CauseRejected
	Reason string      // KindReject: for the log and the call record

	// Record is the matched InboundRoute's `record` (the recording
	// policy's first level); nil when it says nothing.
	Record *bool
	// MOHClass is the matched InboundRoute's mohClass: the music a party
	// of the call hears on hold; "" when it names none.
	MOHClass string

	// Steps say what routing did, in order (the call record's steps[]).
	Steps []Step
}

// Step is one routing step.
type Step struct {
	Type    string
	Result  string
	Error   string
	Skipped bool
}

func (r *Result) step(typ, result string) {
	r.Steps = append(r.Steps, Step{Type: typ, Result: result})
}

func (r *Result) reject(status int, cause calls.Cause, typ, reason string) {
	r.Kind, r.Status, r.Cause, r.Reason = KindReject, status, cause, reason
	r.Steps = append(r.Steps, Step{Type: typ, Result: string(cause), Error: reason})
}
