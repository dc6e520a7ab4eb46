package b2bua_test

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/siptest"
)

// goroutinesIn counts the goroutines whose stack holds a call of fn (its
// name as the goroutine dump prints it, up to the opening parenthesis, or
// a package's path and dot for any of its functions).
func goroutinesIn(t *testing.T, fn string) int {
	t.Helper()
	return len(stacksIn(t, fn))
}

// dumpIn returns the stacks goroutinesIn counts.
func dumpIn(t *testing.T, fn string) string {
	t.Helper()
	return strings.Join(stacksIn(t, fn), "\n\n")
}

// waitNoGoroutines waits until no goroutine runs the b2bua's code and, with
// live set, live reports no call.
func waitNoGoroutines(t *testing.T, what string, live func() int) {
	t.Helper()
	const b2bua = "pbx/sipcore/b2bua."
	calls := func() int {
		if live == nil {
			return 0
		}
		return live()
	}
	deadline := time.Now().Add(wait)
	for calls() > 0 || goroutinesIn(t, b2bua) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d live calls, %d goroutines in the b2bua, want none:\n%s", what, calls(), goroutinesIn(t, b2bua), dumpIn(t, b2bua))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stacksIn(t *testing.T, fn string) []string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(fn, ".") {
		fn += "("
	}
	var out []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			out = append(out, g)
		}
	}
	return out
}

// TestAnsweredCallLeavesTheInviteHandler: once a call is answered and
// confirmed, the INVITE's handler has returned and the call waits for its
// end with no goroutine of the b2bua's at all (see endWait); the call goes
// on, the callee's hang-up reaches the caller over the caller's connection
// (TCP: the INVITE's transaction is ended when the handler returns), and
// the call ends as before.
func TestAnsweredCallLeavesTheInviteHandler(t *testing.T) {
	for _, tr := range []string{"udp", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			alice := e.phone(tr, "alice", "alice-pw")
			bob := e.phone(tr, "bob", "bob-pw")
			call, in := answered(t, alice, bob, "102")
			waitNoGoroutines(t, "answered call", nil)
			exchange(t, call.Media(), in.Media(), 20, "a")
			exchange(t, in.Media(), call.Media(), 20, "b")
			if err := in.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			waitCh(t, call.Ended(), "alice BYE")
			if !call.RemoteHangup() {
				t.Fatal("alice did not get a BYE")
			}
			if ev := e.rec.ended(t); ev.Call.Cause != calls.CauseAnswered {
				t.Fatalf("ended event %+v", ev.Call)
			}
			waitNoGoroutines(t, "after the BYE", func() int { return len(e.calls.Calls()) })
		})
	}
}

// TestHeldCallsEndFromAllSidesAtOnce: held calls are ended by the caller's
// BYE, the callee's BYE and the API's hang-up at the same moment, each
// from a goroutine of its own, so that the wake-ups of a call's end (the
// dialogs' contexts, requestEnd) race with each other and with the
// goroutine they start (endWait). Every call ends once, with one ended
// event, and leaves no goroutine behind.
func TestHeldCallsEndFromAllSidesAtOnce(t *testing.T) {
	const n = 12
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	type held struct{ call, in *siptest.Call }
	var hs []held
	var ids []b2bua.CallID
	for range n {
		call, in := answered(t, alice, bob, "102")
		hs = append(hs, held{call, in})
	}
	for _, c := range e.calls.Calls() {
		ids = append(ids, c.ID)
	}
	if len(ids) != n {
		t.Fatalf("%d live calls, want %d", len(ids), n)
	}
	waitNoGoroutines(t, "held calls", nil)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, h := range hs {
		for _, end := range []func(){
			func() { _ = h.call.Hangup(ctxT(t)) },
			func() { _ = h.in.Hangup(ctxT(t)) },
			func() { _ = e.calls.Hangup(ids[i]) },
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				end()
			}()
		}
	}
	close(start)
	wg.Wait()
	waitNoGoroutines(t, "after the hang-ups", func() int { return len(e.calls.Calls()) })
	ended := map[b2bua.CallID]int{}
	e.rec.mu.Lock()
	for _, ev := range e.rec.events {
		if ev.Kind == b2bua.EventEnded {
			ended[ev.Call.ID]++
		}
	}
	e.rec.mu.Unlock()
	for _, id := range ids {
		if ended[id] != 1 {
			t.Errorf("call %s: %d ended events, want 1", id, ended[id])
		}
	}
}
