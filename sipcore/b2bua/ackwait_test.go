package b2bua_test

import "testing"

// parkedAcks counts the goroutines sipgo parked to hand an ACK to a server
// transaction's reader that never came.
func parkedAcks(t *testing.T) int {
	t.Helper()
	return goroutinesIn(t, "github.com/emiago/sipgo/sip.(*ServerTx).ackSend")
}

// TestChallengeAckLeavesNoGoroutine: the ACK of the 407 every caller gets
// is read by the INVITE's handler, so no goroutine waits with it for the
// transaction's Timer I (5 s) after each call.
func TestChallengeAckLeavesNoGoroutine(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	before := parkedAcks(t)
	const calls = 10
	for range calls {
		call, _ := answered(t, alice, bob, "102")
		if err := call.Hangup(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := parkedAcks(t) - before; n > calls/2 {
		t.Fatalf("%d goroutines hold an ACK after %d challenged calls, want none", n, calls)
	}
}
