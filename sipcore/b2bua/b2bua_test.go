package b2bua_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

func TestCallRelaysRTP(t *testing.T) {
	for _, tr := range []string{"udp", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			alice := e.phone(tr, "alice", "alice-pw")
			bob := e.phone(tr, "bob", "bob-pw")
			// sipgo handles datagrams concurrently: a 180 immediately followed
			// by a 200 may be overtaken, so ring a moment first.
			bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, Delay: 200 * time.Millisecond})
			var answeredBeforeCaller atomic.Bool
			var call *siptest.Call
			var callMu sync.Mutex
			e.rec.mu.Lock()
			e.rec.onEv = func(ev b2bua.Event) {
				if ev.Kind == b2bua.EventAnswered {
					callMu.Lock()
					c := call
					callMu.Unlock()
					select {
					case <-c.Answered():
					default:
						answeredBeforeCaller.Store(true)
					}
					if ev.Media.Session == nil || ev.Media.Callee == nil {
						t.Errorf("answered event without media access")
					}
				}
			}
			e.rec.mu.Unlock()
			callMu.Lock()
			call = alice.Dial(ctxT(t), "102")
			callMu.Unlock()
			in := bob.WaitIncoming(wait)
			if s := final(t, call); s != 200 {
				_, err := call.Final()
				t.Fatalf("call final %d: %v", s, err)
			}
			waitCh(t, in.Answered(), "bob answered")
			if !answeredBeforeCaller.Load() {
				t.Fatalf("answered event was not delivered before the caller's 200")
			}
			am, bm := call.Media(), in.Media()
			if am.Remote().Port() == uint16(bm.Port()) || bm.Remote().Port() == uint16(am.Port()) {
				t.Fatalf("phones talk directly: alice->%s bob->%s", am.Remote(), bm.Remote())
			}
			exchange(t, am, bm, 40, "a")
			exchange(t, bm, am, 40, "b")

			live := e.calls.Calls()
			if len(live) != 1 || live[0].State != b2bua.StateAnswered || live[0].From != "alice" || live[0].To != "102" || live[0].Tenant != tenant {
				t.Fatalf("live calls %+v", live)
			}
			if err := call.Hangup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			waitCh(t, in.Ended(), "bob BYE")
			if !in.RemoteHangup() {
				t.Fatalf("bob did not get a BYE")
			}
			ev := e.rec.ended(t)
			if ev.Call.Cause != calls.CauseAnswered || ev.Call.Answer.IsZero() || ev.Call.AnsweredBy != "102" || len(ev.Call.Legs) != 1 || !ev.Call.Legs[0].Won {
				t.Fatalf("ended event %+v", ev.Call)
			}
			if ev.Call.SIPCallID == "" || ev.Call.DialogID == "" || ev.Call.FromName != "ALICE" {
				t.Fatalf("ended event identifiers %+v", ev.Call)
			}
			kinds := e.rec.kinds()
			want := []b2bua.EventKind{b2bua.EventCreated, b2bua.EventRinging, b2bua.EventAnswered}
			for i, k := range want {
				if i >= len(kinds) || kinds[i] != k {
					t.Fatalf("events %v, want prefix %v", kinds, want)
				}
			}
		})
	}
}

func TestForkSecondAnswersFirstCancelled(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob1 := e.phone("udp", "bob", "bob-pw")
	bob2 := e.phone("tcp", "bob", "bob-pw")
	bob1.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	bob2.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, Delay: 300 * time.Millisecond})
	call := alice.Dial(ctxT(t), "102")
	in1 := bob1.WaitIncoming(wait)
	in2 := bob2.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	waitCh(t, in1.Cancelled(), "first contact cancelled")
	waitCh(t, in2.Answered(), "second contact answered")
	exchange(t, call.Media(), in2.Media(), 20, "f")
	exchange(t, in2.Media(), call.Media(), 20, "g")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The BYE reaches the TCP phone through its registering connection.
	waitCh(t, in2.Ended(), "tcp callee BYE")
	if !in2.RemoteHangup() {
		t.Fatalf("tcp callee got no BYE")
	}
	ev := e.rec.ended(t)
	won, cancelled := 0, 0
	for _, l := range ev.Call.Legs {
		if l.Won {
			won++
		}
		if l.Cause == calls.CauseCancelled {
			cancelled++
		}
	}
	if len(ev.Call.Legs) != 2 || won != 1 || cancelled != 1 {
		t.Fatalf("legs %+v", ev.Call.Legs)
	}
	legEvents := 0
	for _, k := range e.rec.kinds() {
		if k == b2bua.EventLegEnded {
			legEvents++
		}
	}
	for _, l := range ev.Call.Legs {
		if l.End.IsZero() || l.Start.IsZero() || l.SIPCallID == "" {
			t.Fatalf("leg without times or call id: %+v", l)
		}
	}
	if legEvents != 2 {
		t.Fatalf("%d leg events, want 2: %v", legEvents, e.rec.kinds())
	}
}

func TestBusy(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 486})
	call := alice.Dial(ctxT(t), "102")
	if s := final(t, call); s != 486 {
		t.Fatalf("final %d, want 486", s)
	}
	if ev := e.rec.ended(t); ev.Call.Cause != calls.CauseBusy || ev.Call.SIPStatus != 486 {
		t.Fatalf("ended %+v", ev.Call)
	}
}

func TestNoAnswerRingTimeout(t *testing.T) {
	e := newEnv(t, envOpts{ringTimeout: time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	call := alice.Dial(ctxT(t), "102")
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 480 {
		t.Fatalf("final %d, want 480", s)
	}
	waitCh(t, in.Cancelled(), "callee cancelled")
	if ev := e.rec.ended(t); ev.Call.Cause != calls.CauseNoAnswer {
		t.Fatalf("ended %+v", ev.Call)
	}
}

func TestCallerCancel(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call := alice.Dial(ctx, "102")
	in := bob.WaitIncoming(wait)
	waitCh(t, call.Ringing(), "ringing")
	cancel()
	waitCh(t, call.Done(), "caller done")
	waitCh(t, in.Cancelled(), "callee cancelled")
	if ev := e.rec.ended(t); ev.Call.Cause != calls.CauseCancelled || ev.Call.SIPStatus != 487 {
		t.Fatalf("ended %+v", ev.Call)
	}
}

func TestHoldResume(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call, in := answered(t, alice, bob, "102")
	for _, step := range []struct{ dir, want, answer string }{
		{"sendonly", "sendonly", "recvonly"},
		{"sendrecv", "sendrecv", "sendrecv"},
	} {
		res, ans, err := call.ReInvite(ctxT(t), step.dir)
		if err != nil {
			t.Fatalf("%s: %v", step.dir, err)
		}
		if res.StatusCode != 200 || ans == nil || ans.Direction != step.answer {
			t.Fatalf("%s: answer %d %+v", step.dir, res.StatusCode, ans)
		}
		select {
		case offer := <-in.ReInvites():
			if offer.Direction != step.want {
				t.Fatalf("bob got %s, want %s", offer.Direction, step.want)
			}
		case <-time.After(wait):
			t.Fatalf("bob got no re-INVITE for %s", step.dir)
		}
	}
	exchange(t, call.Media(), in.Media(), 20, "r")
	var holds []b2bua.EventKind
	for _, k := range e.rec.kinds() {
		if k == b2bua.EventHeld || k == b2bua.EventResumed {
			holds = append(holds, k)
		}
	}
	if len(holds) != 2 || holds[0] != b2bua.EventHeld || holds[1] != b2bua.EventResumed {
		t.Errorf("hold events %v, want held then resumed", holds)
	}
	// And from the callee's side.
	res, ans, err := in.ReInvite(ctxT(t), "sendonly")
	if err != nil || res.StatusCode != 200 || ans.Direction != "recvonly" {
		t.Fatalf("callee hold: %v %v %+v", err, res, ans)
	}
	if err := in.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, call.Ended(), "caller BYE")
}

func TestNoCommonCodec(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw", 9) // G.722 only
	e.phone("udp", "bob", "bob-pw")
	call := alice.Dial(ctxT(t), "102")
	if s := final(t, call); s != 488 {
		t.Fatalf("final %d, want 488", s)
	}
}

func TestMediaTimeoutEndsCall(t *testing.T) {
	e := newEnv(t, envOpts{mediaTimeout: time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call := alice.Dial(ctxT(t), "102")
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	waitCh(t, call.Ended(), "caller BYE after media timeout")
	waitCh(t, in.Ended(), "callee BYE after media timeout")
	if !call.RemoteHangup() || !in.RemoteHangup() {
		t.Fatalf("both sides should have received BYE")
	}
	if ev := e.rec.ended(t); ev.Call.Reason != "media timeout" {
		t.Fatalf("ended %+v", ev.Call)
	}
}

// TestOnAuthSuccessRefusesInvite: an INVITE with valid credentials that
// the OnAuthSuccess hook refuses is answered 403 and places no call.
func TestOnAuthSuccessRefusesInvite(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	e := newEnv(t, envOpts{onAuthSuccess: func(src netip.AddrPort, d, u string) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d+" "+u)
		return u != "alice"
	}})
	e.phone("udp", "bob", "bob-pw")
	alice := e.phone("udp", "alice", "alice-pw")
	if s := final(t, alice.Dial(ctxT(t), "102")); s != 403 {
		t.Fatalf("refused caller: %d, want 403", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != domain+" alice" {
		t.Fatalf("successes reported %q, want alice's once", seen)
	}
	if n := e.calls.Active(); n != 0 {
		t.Fatalf("%d calls placed", n)
	}
}

func TestRejections(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	if s := final(t, alice.Dial(ctxT(t), "999")); s != 404 {
		t.Fatalf("unknown extension: %d", s)
	}
	if s := final(t, alice.Dial(ctxT(t), "103")); s != 480 {
		t.Fatalf("no contacts: %d", s)
	}
	mallory := siptest.NewPhone(t, siptest.Options{Username: "alice", Password: "wrong", Domain: domain, PBX: e.udp})
	if s := final(t, mallory.Dial(ctxT(t), "102")); s != 403 {
		t.Fatalf("wrong password: %d", s)
	}
	// BYE for a dialog that does not exist.
	bye := sip.NewRequest(sip.BYE, sip.Uri{Scheme: "sip", User: "102", Host: domain})
	bye.SetDestination(e.udp.String())
	from := &sip.FromHeader{Address: sip.Uri{Scheme: "sip", User: "alice", Host: domain}}
	from.Params.Add("tag", "a")
	to := &sip.ToHeader{Address: sip.Uri{Scheme: "sip", User: "102", Host: domain}}
	to.Params.Add("tag", "b")
	bye.AppendHeader(from)
	bye.AppendHeader(to)
	res, err := alice.Send(ctxT(t), bye)
	if err != nil || res.StatusCode != 481 {
		t.Fatalf("stray BYE: %v %v", res, err)
	}
	e.srv.Drain()
	if s := final(t, alice.Dial(ctxT(t), "102")); s != 503 {
		t.Fatalf("while draining: %d", s)
	}
}

func TestHangupFromAPI(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("tcp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call := alice.Dial(ctxT(t), "102")
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	live := e.calls.Calls()
	if len(live) != 1 {
		t.Fatalf("live %+v", live)
	}
	if err := e.calls.Hangup(live[0].ID); err != nil {
		t.Fatal(err)
	}
	waitCh(t, call.Ended(), "caller BYE")
	waitCh(t, in.Ended(), "callee BYE")
	e.rec.ended(t)
	if err := e.calls.Hangup("nope"); err == nil {
		t.Fatalf("hangup of unknown call succeeded")
	}
}

func TestEarlyMediaRelayedBeforeAnswer(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, EarlyMedia: true, Delay: 2 * time.Second})
	call := alice.Dial(ctxT(t), "102")
	in := bob.WaitIncoming(wait)
	waitCh(t, in.EarlyMedia(), "callee early media")
	waitCh(t, call.EarlyMedia(), "caller 183 with sdp")
	// Ringback from the callee reaches the caller before the answer.
	exchange(t, in.Media(), call.Media(), 10, "e")
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	exchange(t, call.Media(), in.Media(), 10, "x")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "bob BYE")
}

func TestLateAnswerFromCancelledLegGetsAckAndBye(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Answer, Delay: 500 * time.Millisecond})
	raw := newRawUAS(t)
	req := bob.RegisterRequest(600)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "raw", Host: "127.0.0.1", Port: int(raw.addr().Port())}})
	if res, err := bob.SendAuth(ctxT(t), req); err != nil || res.StatusCode != 200 {
		t.Fatalf("register raw contact: %v %v", res, err)
	}
	call := alice.Dial(ctxT(t), "102")
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	for _, want := range []string{"ACK", "BYE"} {
		select {
		case got := <-raw.got:
			if got != want {
				t.Fatalf("raw contact got %s, want %s", got, want)
			}
		case <-time.After(wait):
			t.Fatalf("raw contact got no %s for its late 200", want)
		}
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestTrustedCallerSkipsDigest(t *testing.T) {
	e := newEnv(t, envOpts{identify: func(req *sip.Request, src netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
		if h := req.GetHeader("X-Test-Trunk"); h != nil && src.Addr().IsLoopback() {
			return b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: tenant, Trunk: h.Value()}, true, nil
		}
		return b2bua.Caller{}, false, nil
	}})
	bob := e.phone("udp", "bob", "bob-pw")
	carrier := siptest.NewPhone(t, siptest.Options{Username: "+15550100", Domain: domain, PBX: e.udp}) // no password
	call := carrier.DialWith(ctxT(t), "102", sip.NewHeader("X-Test-Trunk", "carrier-a"))
	in := bob.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("trunk call: %d", s)
	}
	waitCh(t, in.Answered(), "answered")
	if got := in.Invite.From().Address.User; got != "+15550100" {
		t.Fatalf("callee sees caller %q, want the trunk's calling number", got)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ev := e.rec.ended(t)
	if ev.Call.Caller.Kind != b2bua.KindTrunk || ev.Call.Caller.Trunk != "carrier-a" {
		t.Fatalf("caller %+v", ev.Call.Caller)
	}
	// Without the header the same phone is challenged, and has no password.
	if s := final(t, carrier.Dial(ctxT(t), "102")); s != 407 {
		t.Fatalf("untrusted: %d, want 407", s)
	}
}

func TestDeadContactDoesNotHoldTheCall(t *testing.T) {
	e := newEnv(t, envOpts{ringTimeout: 3 * time.Second})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	// A stale registration: the contact's socket swallows everything.
	dead, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := dead.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	req := bob.RegisterRequest(600)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "bob", Host: "127.0.0.1", Port: dead.LocalAddr().(*net.UDPAddr).Port}})
	if res, err := bob.SendAuth(ctxT(t), req); err != nil || res.StatusCode != 200 {
		t.Fatalf("register dead contact: %v %v", res, err)
	}
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	call := alice.Dial(ctxT(t), "102")
	bob.WaitIncoming(wait)
	if s := final(t, call); s != 480 {
		t.Fatalf("final %d, want 480", s)
	}
	// sipgo alone would hold the silent leg for 64*T1 (32 s) waiting for a
	// provisional before it may CANCEL; the record must not wait that long.
	ev := e.rec.ended(t)
	if ev.Call.Cause != calls.CauseNoAnswer || len(ev.Call.Legs) != 2 {
		t.Fatalf("ended %+v", ev.Call)
	}
}

// TestDeadContactDoesNotHoldAnAnsweredCall: with a stale binding beside
// the phone that answers at once, the caller hangs up within a second; the
// silent loser is dropped once it is two seconds old (it never sent a
// provisional, so it cannot be cancelled), and the call ends then, not
// after 64*T1.
func TestDeadContactDoesNotHoldAnAnsweredCall(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	dead, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := dead.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	req := bob.RegisterRequest(600)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "bob", Host: "127.0.0.1", Port: dead.LocalAddr().(*net.UDPAddr).Port}})
	if res, err := bob.SendAuth(ctxT(t), req); err != nil || res.StatusCode != 200 {
		t.Fatalf("register dead contact: %v %v", res, err)
	}
	call, _ := answered(t, alice, bob, "102")
	start := time.Now()
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ev := e.rec.ended(t)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the call ended %v after the hang-up, held by its silent leg", took)
	}
	if ev.Call.Cause != calls.CauseAnswered || len(ev.Call.Legs) != 2 {
		t.Fatalf("ended %+v", ev.Call)
	}
}

// TestInfoRelayedBothWays: DTMF INFO toward far ends without
// telephone-event in their SDP is relayed as INFO, both ways.
func TestInfoRelayedBothWays(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("tcp", "bob", "bob-pw")
	alice.SetNoTelephoneEvent(true)
	bob.SetNoTelephoneEvent(true)
	call, in := answered(t, alice, bob, "102")
	for _, c := range []struct {
		from, to *siptest.Call
		body     string
	}{{call, in, "Signal=5\r\nDuration=160\r\n"}, {in, call, "Signal=#\r\nDuration=100\r\n"}} {
		status, err := c.from.SendInfo(ctxT(t), "application/dtmf-relay", []byte(c.body))
		if err != nil || status != 200 {
			t.Fatalf("info: %d %v", status, err)
		}
		select {
		case got := <-c.to.Infos():
			if string(got) != c.body {
				t.Fatalf("relayed %q, want %q", got, c.body)
			}
		case <-time.After(wait):
			t.Fatal("info not relayed")
		}
	}
	if err := in.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, call.Ended(), "caller BYE")
}

// A sequential ring group: 102 rings alone for a second, then 103.
func TestSequentialLegs(t *testing.T) {
	e := newEnv(t, envOpts{route: func(in *b2bua.Inbound, reg *registrar.Registrar, srv *sipcore.Server) b2bua.Decision {
		first := b2bua.LegsFor(reg.Lookup(tenant, "102"), srv.ConnectionOpen, "102", "102")
		second := b2bua.LegsFor(reg.Lookup(tenant, "103"), srv.ConnectionOpen, "103", "103")
		for i := range first {
			first[i].Timeout = time.Second
		}
		for i := range second {
			second[i].Delay = 1500 * time.Millisecond
		}
		return b2bua.Decision{Target: &b2bua.Target{
			Legs: append(first, second...), RingTimeout: 10 * time.Second,
			CallerID: b2bua.Identity{User: in.Caller.Extension},
			Meta:     b2bua.Meta{Tenant: tenant, Direction: calls.DirectionInternal, Extension: "600", Domain: domain},
		}}
	}})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring})
	call := alice.Dial(ctxT(t), "600")
	inBob := bob.WaitIncoming(wait)
	waitCh(t, inBob.Cancelled(), "first member given up")
	inCarol := carol.WaitIncoming(wait)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	waitCh(t, inCarol.Answered(), "second member answered")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ev := e.rec.ended(t)
	if ev.Call.AnsweredBy != "103" || len(ev.Call.Legs) != 2 || ev.Call.Legs[0].Cause != calls.CauseNoAnswer {
		t.Fatalf("ended %+v", ev.Call)
	}
	if gap := ev.Call.Legs[1].Start.Sub(ev.Call.Legs[0].Start); gap < time.Second {
		t.Fatalf("second member started %s after the first, want its 1s delay", gap)
	}
}

func TestLoopStopsAtMaxForwards(t *testing.T) {
	e := newEnv(t, envOpts{identify: func(req *sip.Request, src netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
		return b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: tenant}, true, nil
	}})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	// A contact that points back at the PBX itself.
	req := bob.RegisterRequest(600)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "102", Host: "127.0.0.1", Port: int(e.udp.Port())}})
	if res, err := bob.SendAuth(ctxT(t), req); err != nil || res.StatusCode != 200 {
		t.Fatalf("register looping contact: %v %v", res, err)
	}
	req = bob.RegisterRequest(0) // drop the phone's own contact
	if res, err := bob.SendAuth(ctxT(t), req); err != nil || res.StatusCode != 200 {
		t.Fatalf("unregister: %v %v", res, err)
	}
	if s := final(t, alice.Dial(ctxT(t), "102")); s != 483 {
		t.Fatalf("looping call: %d, want 483", s)
	}
}

// BenchmarkCallSetup measures a whole internal call through the PBX:
// INVITE with digest, fork to one contact, answer, ACK, BYE both sides.
func BenchmarkCallSetup(b *testing.B) {
	e := newEnv(b, envOpts{})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	ctx := context.Background()
	b.ReportAllocs() // the phones' share included, the same from run to run
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		call := alice.Dial(ctx, "102")
		in := <-bob.Incoming()
		<-call.Done()
		if s, err := call.Final(); s != 200 {
			b.Fatalf("final %d: %v", s, err)
		}
		<-in.Answered()
		if err := call.Hangup(ctx); err != nil {
			b.Fatal(err)
		}
		<-in.Ended()
	}
}
