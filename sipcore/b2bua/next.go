package b2bua

import (
	"sync"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/calls"
)

// dialFailure is a dial whose legs all failed, before the caller got its
// final answer: the failure Target.Next is told, and the reason the call
// record gives when nothing follows.
type dialFailure struct {
	Failure
	reason string
}

// dialFailed settles a failed dial: without a Target.Next the caller gets
// the failure at once (as it always has) and nil is returned; with one the
// failure is returned for place to ask it, once the dial's legs settled.
func (c *Call) dialFailed(target *Target, f Failure, reason string) *dialFailure {
	if target.Next == nil {
		c.fail(f.Status, f.Cause, reason)
		return nil
	}
	return &dialFailure{Failure: f, reason: reason}
}

// place runs target to the call's end: a local application (App), or a
// dial of its legs; when every leg of a dial failed and the target has a
// Next, the Target Next returns is run instead (another dial, or an App),
// until one answers, a Next returns nil (the caller gets the last failure)
// or the caller cancels. It runs on the call's goroutine.
func (c *Call) place(target *Target) {
	for dials := 0; ; dials++ {
		var f *dialFailure
		switch {
		case target.App != nil:
			c.runApp(target) // app_call.go
			return
		case len(target.Legs) == 0:
			f = c.dialFailed(target, Failure{Cause: calls.CauseNoAnswer, Status: sip.StatusTemporarilyUnavailable}, "no contacts registered")
		default:
			if dials > 0 {
				c.resetFork()
			}
			f = c.fork(target)
		}
		if f == nil {
			return
		}
		// The failed legs are settled and their media closed; nothing of
		// their early media reaches the caller any more.
		c.session.Unbridge(c.callerLeg)
		ctx := c.caller.Context()
		var next *Target
		if ctx.Err() == nil {
			next = target.Next(ctx, f.Failure)
		}
		if ctx.Err() != nil {
			c.finish(calls.CauseCancelled, sip.StatusRequestTerminated, "caller cancelled")
			return
		}
		if next == nil {
			c.fail(f.Status, f.Cause, f.reason)
			return
		}
		c.applyMeta(next.Meta)
		target = next
	}
}

// resetFork readies the call for another dial after one whose legs all
// failed (they have all returned: fork waits for them).
func (c *Call) resetFork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forkClosed = false
	c.claimed = nil
	c.legCh = make(chan legEvent, 16)
	c.forkDone = make(chan struct{})
	c.forkOnce = sync.Once{}
}

// applyMeta takes the metadata of a Target that follows a failed dial:
// a zero Meta keeps the call's.
func (c *Call) applyMeta(mt Meta) {
	if mt.Tenant == "" && mt.Direction == "" && mt.Extension == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if mt.Tenant != "" {
		c.info.Tenant = mt.Tenant
	}
	c.info.Direction, c.info.Extension, c.info.DID, c.info.Trunk, c.info.Meta = mt.Direction, mt.Extension, mt.DID, mt.Trunk, mt
}
