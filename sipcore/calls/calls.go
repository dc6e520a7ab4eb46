// Package calls defines the words every part of the PBX uses about a call's
// outcome and direction: the causes the B2BUA gives a call or leg, routing
// gives a rejected call and the call record stores, and the three
// directions. It is a leaf: sipcore/b2bua, appliance/routing and
// appliance/cdr all use these types, none keeps a copy.
package calls

// Cause says how a call or a leg ended (the call record's cause field).
// Exactly nine values exist.
type Cause string

// Causes.
const (
	CauseAnswered  Cause = "answered"
	CauseNoAnswer  Cause = "no_answer"
	CauseBusy      Cause = "busy"
	CauseRejected  Cause = "rejected"
	CauseNoRoute   Cause = "no_route"
	CauseCancelled Cause = "cancelled"
	CauseFailed    Cause = "failed"
	CauseError     Cause = "error"
	// CauseIncomplete is a call record recovered from an in-flight marker
	// (the process ended before the call did); the B2BUA never gives it.
	CauseIncomplete Cause = "incomplete"
)

// Causes lists every valid cause.
var Causes = []Cause{CauseAnswered, CauseNoAnswer, CauseBusy, CauseRejected, CauseNoRoute,
	CauseCancelled, CauseFailed, CauseError, CauseIncomplete}

// Valid reports whether c is one of the nine causes.
func (c Cause) Valid() bool {
	for _, v := range Causes {
		if c == v {
			return true
		}
	}
	return false
}

// Direction of a call.
type Direction string

// Directions.
const (
	DirectionInbound  Direction = "inbound"  // arrived on a trunk
	DirectionOutbound Direction = "outbound" // leaves on a trunk
	DirectionInternal Direction = "internal" // between extensions
)

// Valid reports whether d is one of the three directions.
func (d Direction) Valid() bool {
	return d == DirectionInbound || d == DirectionOutbound || d == DirectionInternal
}
