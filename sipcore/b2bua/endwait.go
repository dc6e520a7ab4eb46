package b2bua

import (
	"context"
	"sync/atomic"
)

// endWait is how an answered call waits for its end: with no goroutine.
// What ends a call or changes it wakes it instead: a request on endCh
// (requestEnd), a transfer job on transferJobs (transfer.go, replaces.go),
// or the end of the caller's or the winner's dialog (context.AfterFunc on
// their contexts). The first wake-up starts a goroutine that takes what
// came, runs it (a transfer, or the tear-down) and, when the call goes on,
// waits again; later wake-ups find it busy and leave what they brought
// for it.
//
// A goroutine per held call cost its stack and its descriptor. Measured
// at 1,000 held calls (BenchmarkConcurrentCallsRelay with PBX_PPROF,
// PBX_BENCH_CALLS=1000, PBX_BENCH_HOLD=25s; runtime/metrics and the
// goroutine profile with every call up), with a goroutine per call
// against none: goroutines 1,040 against 40, /memory/classes/heap/stacks
// 5.1 MB against 1.1, resident memory per call over four runs each 53.2
// to 56.5 kB against 49.0 to 52.2. CPU per call at 500 calls/s is the
// same (BenchmarkSIPpCallSetup ABAB: runtime.morestack 16.7-16.8 a call
// and 30.6 context switches a call on both, perf uprobes).
type endWait struct {
	// armed: the call is answered and up, and wake-ups start its
	// goroutine.
	armed atomic.Bool
	// busy: a goroutine serves the call's end, or the call has ended
	// (then it stays set).
	busy atomic.Bool

	// settle is set by fork once the call is answered and up: what the
	// call's end leaves it to do (its legs settled). The rest is set by
	// armEnd; then all is used by the serving goroutine only.
	settle     func()
	stopCaller func() bool     // stops the AfterFunc on the caller's dialog
	winnerCtx  context.Context // the winner's dialog context watched, nil: none
	stopWinner func() bool
}

// armEnd makes the answered call wait for its end (see endWait); its
// settle runs once it is torn down, before the call is reported ended. An
// end that came before is served at once.
func (c *Call) armEnd() {
	w := &c.wait
	w.stopCaller = context.AfterFunc(c.caller.Context(), c.wakeHere)
	c.watchWinner()
	w.armed.Store(true)
	c.wake()
}

// watchWinner has the end of the winner's dialog wake the call, the
// winner being the one now (a transfer may have replaced it).
func (c *Call) watchWinner() {
	w := &c.wait
	ctx := c.winnerContext()
	if ctx == w.winnerCtx {
		return
	}
	if w.stopWinner != nil {
		w.stopWinner()
		w.stopWinner = nil
	}
	w.winnerCtx = ctx
	if ctx != nil {
		w.stopWinner = context.AfterFunc(ctx, c.wakeHere)
	}
}

// winnerContext is the context of the winner's dialog, nil when there is
// none.
func (c *Call) winnerContext() context.Context {
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	if w == nil || w.dialog == nil {
		return nil
	}
	return w.dialog.Context()
}

// wake serves the call's end on a new goroutine unless one serves it
// already (or the call is not answered yet: then whoever reads endCh and
// transferJobs now, the fork, sees what came). Call it after sending on
// endCh or transferJobs.
func (c *Call) wake() {
	if c.claimEnd() {
		go c.serveEnd()
	}
}

// wakeHere is wake on a goroutine of the caller's own (context.AfterFunc
// starts one for each function it calls): the end is served there.
func (c *Call) wakeHere() {
	if c.claimEnd() {
		c.serveEnd()
	}
}

// claimEnd reports whether the caller is to serve the call's end: it is
// armed, and no goroutine serves it.
func (c *Call) claimEnd() bool {
	return c.wait.armed.Load() && c.wait.busy.CompareAndSwap(false, true)
}

// serveEnd takes what woke the call: a transfer runs (the call goes on if
// it failed), an end tears the call down. With nothing left, it lets go
// of the call unless something came meanwhile: a wake-up that found it
// busy left what it brought before it looked, so looking again after
// clearing busy sees it, or else that wake-up saw busy clear and started
// a goroutine of its own.
func (c *Call) serveEnd() {
	// The wake-up's goroutine is fresh: its stack is grown in one step
	// before the work, which goes deep (see growStack).
	growStack()
	for {
		reason, job, ok := c.takeEnd()
		if !ok {
			c.wait.busy.Store(false)
			if !c.endPending() || !c.wait.busy.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		if job != nil {
			if !c.runTransfer(*job) {
				c.watchWinner()
				continue
			}
		} else {
			c.tearDown(reason)
		}
		c.endWaited()
		return
	}
}

// takeEnd takes, without waiting, what ends the call or changes it: an
// end's reason, or a transfer job; false when there is neither.
func (c *Call) takeEnd() (reason string, job *transferJob, ok bool) {
	select {
	case reason = <-c.endCh:
		return reason, nil, true
	case <-c.caller.Context().Done():
		return "caller hung up", nil, true
	case <-c.winnerDone():
		return "callee hung up", nil, true
	case j := <-c.transferJobs:
		return "", &j, true
	default:
		return "", nil, false
	}
}

// endPending reports whether takeEnd would find something, taking
// nothing.
func (c *Call) endPending() bool {
	if len(c.endCh) > 0 || len(c.transferJobs) > 0 || c.caller.Context().Err() != nil {
		return true
	}
	select {
	case <-c.winnerDone():
		return true
	default:
		return false
	}
}

// endWaited finishes a call whose end was waited for: the dialogs'
// watches are stopped, the fork's legs settled and the call reported
// ended. busy stays set: later wake-ups find nothing to do.
func (c *Call) endWaited() {
	w := &c.wait
	w.stopCaller()
	if w.stopWinner != nil {
		w.stopWinner()
	}
	w.settle()
	c.ended()
}
