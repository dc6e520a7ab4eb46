package guard

import (
	"errors"
	"testing"
	"time"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// TestReserveTransfer: a transfer's new leg takes a place of its own next to
// the call's (refused at the tenant's concurrency limit), is given back at
// once when the transfer fails, and when it answered to a trunk is metered
// from the transfer's answer to the call's end, with the call's own minutes.
func TestReserveTransfer(t *testing.T) {
	cfg := limitsConfig(t, `      maxConcurrentCalls: 2
      outboundMinutesPerHour: 60`, `      maxConcurrentCalls: 2`)
	clk := newClock()
	l := NewLimiter(cfg, clk.Now)
	id := b2bua.NewCallID(clk.Now())
	if err := l.ReserveCall(id, Claim{Tenant: "acme", Account: "alice", Outbound: true}); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	l.CallEvent(b2bua.Event{Kind: b2bua.EventAnswered, Call: b2bua.CallInfo{ID: id, Answer: start}})

	// A failed transfer gives its place back.
	if err := l.ReserveTransfer(id, Claim{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if got := l.Usage("acme").Active; got != 2 {
		t.Fatalf("active %d while the transfer rings, want 2", got)
	}
	other := b2bua.NewCallID(clk.Now())
	if err := l.ReserveCall(other, Claim{Tenant: "acme"}); !errors.Is(err, ErrConcurrentCalls) {
		t.Fatalf("a third call while the transfer rings: %v, want ErrConcurrentCalls", err)
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, At: clk.Now(), Call: b2bua.CallInfo{ID: id},
		Transfer: &b2bua.Transfer{Result: calls.CauseBusy, SIPStatus: 486}})
	if got := l.Usage("acme").Active; got != 1 {
		t.Fatalf("active %d after a failed transfer, want 1", got)
	}

	// An answered transfer to a trunk is metered from its answer.
	clk.Advance(time.Minute)
	if err := l.ReserveTransfer(id, Claim{Tenant: "acme", Outbound: true}); err != nil {
		t.Fatal(err)
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventTransfer, At: clk.Now(), Call: b2bua.CallInfo{ID: id},
		Transfer: &b2bua.Transfer{Result: calls.CauseAnswered, SIPStatus: 200}})
	clk.Advance(30 * time.Second)
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: b2bua.CallInfo{ID: id, Answer: start, End: clk.Now()}})
	u := l.Usage("acme")
	// The call's own 1.5 minutes and the transfer leg's 0.5.
	if u.Active != 0 || u.OutboundHourMins != 2 {
		t.Fatalf("usage %+v after the call ended, want 0 active and 2 outbound minutes", u)
	}
}
