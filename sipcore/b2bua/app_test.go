package b2bua_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"

	"pbx/rtpcore"
	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

// appExt is the number the test router answers with the test application.
const appExt = "500"

// testApp is a local application the test drives: Run hands its context
// and channel over, then returns what the test sends on ret, or "" once
// its context ends.
type testApp struct {
	started   chan appStart
	ret       chan calls.Cause
	cancelled chan struct{}
}

type appStart struct {
	ctx context.Context
	ch  b2bua.Channel
}

func newTestApp() *testApp {
	return &testApp{started: make(chan appStart, 1), ret: make(chan calls.Cause, 1), cancelled: make(chan struct{})}
}

func (a *testApp) Run(ctx context.Context, ch b2bua.Channel) calls.Cause {
	a.started <- appStart{ctx, ch}
	select {
	case cause := <-a.ret:
		return cause
	case <-ctx.Done():
		close(a.cancelled)
		return ""
	}
}

func (a *testApp) wait(t *testing.T) appStart {
	t.Helper()
	select {
	case s := <-a.started:
		return s
	case <-time.After(wait):
		t.Fatal("the application did not start")
	}
	return appStart{}
}

// appRouter answers appExt with app and dials other extensions with next
// as the dial's Target.Next.
func appRouter(app b2bua.App, next func(ctx context.Context, f b2bua.Failure) *b2bua.Target) func(*b2bua.Inbound, *registrar.Registrar, *sipcore.Server) b2bua.Decision {
	return appRouterRing(app, next, 10*time.Second)
}

// appRouterRing is appRouter with the dial's ring timeout.
func appRouterRing(app b2bua.App, next func(ctx context.Context, f b2bua.Failure) *b2bua.Target, ring time.Duration) func(*b2bua.Inbound, *registrar.Registrar, *sipcore.Server) b2bua.Decision {
	return func(in *b2bua.Inbound, reg *registrar.Registrar, srv *sipcore.Server) b2bua.Decision {
		ext := in.RequestURI.User
		meta := b2bua.Meta{Tenant: in.Caller.Tenant, Direction: calls.DirectionInternal, Extension: ext, Domain: domain}
		if ext == appExt {
			return b2bua.Decision{Target: &b2bua.Target{App: app, Name: "test-app", Meta: meta}}
		}
		legs := b2bua.LegsFor(reg.Lookup(in.Caller.Tenant, ext), srv.ConnectionOpen, ext, ext)
		return b2bua.Decision{Target: &b2bua.Target{Legs: legs, RingTimeout: ring, CallerID: b2bua.Identity{User: in.Caller.Extension}, Meta: meta, Next: next}}
	}
}

// pattern is n samples of a known, never silent, waveform.
func pattern(n, seed int) []int16 {
	out := make([]int16, n)
	for i := range out {
		out[i] = int16(1000 + ((i*37 + seed*1013) % 6000))
	}
	return out
}

// g711Roundtrip is what a phone decodes of pcm sent as payload type pt.
func g711Roundtrip(pt uint8, pcm []int16) []int16 {
	enc, _ := rtpcore.Encode(pt, nil, pcm)
	dec, _ := rtpcore.Decode(pt, nil, enc)
	return dec
}

// findFrames looks for want, frame by frame, in consecutive packets of got
// and reports whether it is there.
func findFrames(got []rtp.Packet, pt uint8, want []int16) bool {
	for k := range got {
		ok := true
		for f := 0; f*160 < len(want); f++ {
			if k+f >= len(got) {
				return false
			}
			dec, _ := rtpcore.Decode(pt, nil, got[k+f].Payload)
			chunk := want[f*160 : min(len(want), (f+1)*160)] // the last frame is padded with silence
			if got[k+f].PayloadType != pt || len(dec) != 160 || !slices.Equal(dec[:len(chunk)], chunk) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// checkContinuous checks the PBX's stream to a phone is one: sequence
// numbers consecutive, timestamps advancing by whole frames, one SSRC.
func checkContinuous(t *testing.T, got []rtp.Packet) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if b.SequenceNumber != a.SequenceNumber+1 || b.SSRC != a.SSRC {
			t.Fatalf("packet %d: seq %d ssrc %x after seq %d ssrc %x", i, b.SequenceNumber, b.SSRC, a.SequenceNumber, a.SSRC)
		}
		if d := b.Timestamp - a.Timestamp; d == 0 || d%160 != 0 || d > 160*500 {
			t.Fatalf("packet %d: timestamp step %d", i, d)
		}
	}
}

// play plays pcm on ch and waits until phone media m received it.
func play(t *testing.T, ch b2bua.Channel, m *siptest.Media, pt uint8, pcm []int16) {
	t.Helper()
	if err := ch.Play(ctxT(t), pcm); err != nil {
		t.Fatalf("play: %v", err)
	}
	want := g711Roundtrip(pt, pcm)
	deadline := time.Now().Add(wait)
	for !findFrames(m.Received(), pt, want) {
		if time.Now().After(deadline) {
			got := m.Received()
			for _, p := range got[:min(len(got), 8)] {
				dec, _ := rtpcore.Decode(p.PayloadType, nil, p.Payload)
				t.Logf("pt %d seq %d ts %d %v", p.PayloadType, p.SequenceNumber, p.Timestamp, dec[:4])
			}
			t.Logf("want %v", want[:4])
			t.Fatalf("the phone never received the played audio (%d packets)", len(m.Received()))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, _ = m.WaitReceived(ctx, len(m.Received())+1)
		cancel()
	}
}

func readDigit(t *testing.T, ch b2bua.Channel, want rune) {
	t.Helper()
	select {
	case d := <-ch.Digits():
		if d != want {
			t.Fatalf("digit %q, want %q", d, want)
		}
	case <-time.After(wait):
		t.Fatalf("digit %q never reached the application", want)
	}
}

func sendInfoDigit(t *testing.T, call *siptest.Call, d string) {
	t.Helper()
	if s, err := call.SendInfo(ctxT(t), "application/dtmf-relay", []byte("Signal="+d+"\r\nDuration=160\r\n")); err != nil || s != 200 {
		t.Fatalf("info %s: %d %v", d, s, err)
	}
}

// An application answers a call itself: the phone hears what it plays
// (sample for sample, one continuous RTP stream across plays and the
// silence between), its RFC 4733 and INFO digits reach the application,
// a hold re-INVITE is answered with the direction mirrored, and the
// phone's BYE cancels the application's context.
func TestAppPlaysReadsDigitsAndEndsOnBye(t *testing.T) {
	app := newTestApp()
	e := newEnv(t, envOpts{route: appRouter(app, nil)})
	alice := e.phone("udp", "alice", "alice-pw")
	call := alice.Dial(ctxT(t), appExt)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d, want 200 from the application", s)
	}
	st := app.wait(t)
	ch := st.ch
	if info := ch.Call(); info.State != b2bua.StateAnswered || info.Extension != appExt {
		t.Fatalf("call info %+v", info)
	}
	m := call.Media()
	const pt = rtpcore.PayloadPCMA // the PBX's first configured codec
	play(t, ch, m, pt, pattern(800, 1))
	n := len(m.Received())
	if _, err := m.WaitReceived(ctxT(t), n+5); err != nil { // silence in between
		t.Fatal(err)
	}
	play(t, ch, m, pt, pattern(1000, 2))
	checkContinuous(t, m.Received())
	// A Play whose context ends returns ctx.Err() at once, the stream going
	// on with silence.
	pctx, pcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err := ch.Play(pctx, pattern(8000, 3)) // 1 s
	pcancel()
	if err != context.DeadlineExceeded || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("play with a 100 ms context: %v after %s", err, time.Since(start))
	}

	// RFC 4733: progress packets, then the end packet three times: one key press.
	end := []byte{5, 0x80 | 10, 1, 64}
	if err := m.SendEvent(101, []byte{5, 10, 0, 160}, []byte{5, 10, 1, 64}, end, end, end); err != nil {
		t.Fatal(err)
	}
	readDigit(t, ch, '5')
	sendInfoDigit(t, call, "7")
	readDigit(t, ch, '7')

	// Hold and resume are answered by the PBX; the application goes on.
	res, ans, err := call.ReInvite(ctxT(t), "sendonly") // hold
	if err != nil || res.StatusCode != 200 || ans.Direction != "recvonly" {
		t.Fatalf("hold: %v %v %+v", res, err, ans)
	}
	// Answered recvonly: the PBX sends nothing while held (a packet in
	// flight at the 200 may still land).
	held := len(m.Received())
	quiet, qcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	got, _ := m.WaitReceived(quiet, held+3)
	qcancel()
	if len(got) >= held+3 {
		t.Fatalf("%d packets sent to a caller on hold", len(got)-held)
	}
	if res, ans, err = call.ReInvite(ctxT(t), "sendrecv"); err != nil || res.StatusCode != 200 || ans.Direction != "sendrecv" {
		t.Fatalf("resume: %v %v %+v", res, err, ans)
	}
	if _, err := m.WaitReceived(ctxT(t), len(m.Received())+3); err != nil {
		t.Fatalf("no audio after resume: %v", err)
	}
	checkContinuous(t, m.Received())
	ch.HideDigits()
	sendInfoDigit(t, call, "9")
	readDigit(t, ch, '9')
	select {
	case extra := <-ch.Digits():
		t.Fatalf("extra digit %q (end packets counted twice?)", extra)
	default:
	}

	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, app.cancelled, "application context cancelled")
	waitCh(t, ch.Done(), "channel done")
	if err := ch.Play(context.Background(), pattern(160, 3)); err != b2bua.ErrHungUp {
		t.Fatalf("play after hang-up: %v, want ErrHungUp", err)
	}
	ev := e.rec.ended(t)
	if ev.Call.Cause != calls.CauseAnswered || ev.Call.Reason != "caller hung up" {
		t.Fatalf("ended %s %q", ev.Call.Cause, ev.Call.Reason)
	}
	var digits string
	for _, d := range ev.Call.Digits {
		digits += d.Digit
	}
	if digits != "57" {
		t.Fatalf("recorded digits %q, want 57 (9 came after HideDigits)", digits)
	}
	if len(ev.Call.Legs) != 1 || ev.Call.Legs[0].Kind != b2bua.KindLocal || ev.Call.Legs[0].Target != "test-app" || !ev.Call.Legs[0].Won || ev.Call.Legs[0].End.IsZero() {
		t.Fatalf("legs %+v", ev.Call.Legs)
	}
	if ev.Call.AnsweredBy != "" {
		t.Fatalf("answered by %q", ev.Call.AnsweredBy)
	}
	kinds := e.rec.kinds()
	if !slices.Contains(kinds, b2bua.EventAnswered) || !slices.Contains(kinds, b2bua.EventHeld) || !slices.Contains(kinds, b2bua.EventResumed) {
		t.Fatalf("events %v", kinds)
	}
}

// Listen yields the caller's audio in order on a wall-clock time line:
// a pause in the caller's packets is silence (late and duplicate packets:
// TestTimelinePlacesPackets).
func TestAppListenTimeline(t *testing.T) {
	app := newTestApp()
	e := newEnv(t, envOpts{route: appRouter(app, nil)})
	alice := e.phone("udp", "alice", "alice-pw")
	call := alice.Dial(ctxT(t), appExt)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	ch := app.wait(t).ch
	frames, stop := ch.Listen()
	defer stop()
	m := call.Media()
	pt := m.PayloadType()
	frameOf := func(v int16) []int16 { return g711Roundtrip(pt, slices.Repeat([]int16{v}, 160)) }
	send := func(v int16) {
		enc, _ := rtpcore.Encode(pt, nil, slices.Repeat([]int16{v}, 160))
		if _, err := m.Send(enc); err != nil {
			t.Fatal(err)
		}
	}
	var heard [][]int16
	// collect reads frames until cond holds for what was heard.
	collect := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(wait)
		for !cond() {
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatal("frames closed")
				}
				if len(f) != 160 {
					t.Fatalf("frame of %d samples", len(f))
				}
				heard = append(heard, f)
			case <-deadline:
				t.Fatalf("waiting for %s", what)
			}
		}
	}
	silent := func(f []int16) bool { return slices.Equal(f, make([]int16, 160)) }
	trailingSilence := func(n int) func() bool {
		return func() bool {
			k := 0
			for i := len(heard) - 1; i >= 0 && silent(heard[i]); i-- {
				k++
			}
			return k >= n && slices.ContainsFunc(heard, func(f []int16) bool { return !silent(f) })
		}
	}
	first := []int16{2000, 2500, 3000, 3500, 4000}
	for _, v := range first {
		send(v)
	}
	collect("the first burst", trailingSilence(3))
	second := []int16{-2000, -2500, -3000}
	for _, v := range second {
		send(v)
	}
	collect("the second burst", func() bool { return len(heard) > 0 && slices.Equal(heard[len(heard)-1], frameOf(-3000)) })
	var got []int16 // one value per non-silent frame, in order
	gapAt := -1
	for i, f := range heard {
		if silent(f) {
			if len(got) == len(first) && gapAt < 0 {
				gapAt = i
			}
			continue
		}
		got = append(got, f[0])
		if len(got) > len(first)+len(second) {
			break
		}
	}
	var want []int16
	for _, v := range append(slices.Clone(first), second...) {
		want = append(want, frameOf(v)[0])
	}
	if !slices.Equal(got, want) || gapAt < 0 {
		t.Fatalf("heard %v (gap at %d), want %v with silence between the bursts", got, gapAt, want)
	}
	stop()
	for range frames { // closed by stop
	}
	app.ret <- ""
	waitCh(t, call.Ended(), "BYE from the application")
}

// When Run returns, the PBX hangs up with BYE and the record takes Run's
// cause. A late-offer caller gets the PBX's offer (G.711 and
// telephone-event) in the 200 and hears the application.
func TestAppReturnHangsUpLateOffer(t *testing.T) {
	app := newTestApp()
	e := newEnv(t, envOpts{route: appRouter(app, nil)})
	alice := e.phone("udp", "alice", "alice-pw")
	call := alice.DialLateOffer(ctxT(t), appExt, true)
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d", s)
	}
	offer := call.OfferIn2xx()
	if offer == nil || !slices.Contains(offer.Codecs, rtpcore.PayloadPCMA) || !strings.Contains(string(call.Response().Body()), "telephone-event/8000") {
		t.Fatalf("offer in 200: %+v", offer)
	}
	ch := app.wait(t).ch
	play(t, ch, call.Media(), rtpcore.PayloadPCMA, pattern(480, 4)) // first of the PBX's codecs in the ACK's answer
	app.ret <- calls.CauseNoAnswer
	waitCh(t, call.Ended(), "BYE from the application")
	if !call.RemoteHangup() {
		t.Fatal("the PBX did not hang up")
	}
	ev := e.rec.ended(t)
	if ev.Call.Cause != calls.CauseNoAnswer || ev.Call.Reason != "application hung up" {
		t.Fatalf("ended %s %q", ev.Call.Cause, ev.Call.Reason)
	}
}

// A busy callee with a Next that returns an application: the caller gets
// the application's 200, and the record keeps the busy leg.
func TestNextAfterBusyAnswersWithApp(t *testing.T) {
	app := newTestApp()
	var got []b2bua.Failure
	var mu sync.Mutex
	next := func(ctx context.Context, f b2bua.Failure) *b2bua.Target {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
		return &b2bua.Target{App: app, Name: "voicemail"}
	}
	e := newEnv(t, envOpts{route: appRouter(app, next)})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 486})
	call := alice.Dial(ctxT(t), "102")
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d, want 200 from the application", s)
	}
	ch := app.wait(t).ch
	play(t, ch, call.Media(), rtpcore.PayloadPCMA, pattern(320, 5))
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ev := e.rec.ended(t)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Cause != calls.CauseBusy || got[0].Status != 486 {
		t.Fatalf("next called with %+v", got)
	}
	legs := ev.Call.Legs
	if len(legs) != 2 || legs[0].Cause != calls.CauseBusy || legs[0].Won || legs[1].Kind != b2bua.KindLocal || legs[1].Target != "voicemail" || !legs[1].Won {
		t.Fatalf("legs %+v", legs)
	}
	if ev.Call.Cause != calls.CauseAnswered || ev.Call.Extension != "102" {
		t.Fatalf("ended %+v", ev.Call)
	}
}

// A Next returning nil leaves the caller with the dial's failure.
func TestNextNilGivesFailure(t *testing.T) {
	var nexts atomic.Int32
	next := func(ctx context.Context, f b2bua.Failure) *b2bua.Target {
		nexts.Add(1)
		return nil
	}
	e := newEnv(t, envOpts{route: appRouter(nil, next)})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 486})
	call := alice.Dial(ctxT(t), "102")
	if s := final(t, call); s != 486 {
		t.Fatalf("final %d, want 486", s)
	}
	if ev := e.rec.ended(t); ev.Call.Cause != calls.CauseBusy || ev.Call.SIPStatus != 486 {
		t.Fatalf("ended %s %d", ev.Call.Cause, ev.Call.SIPStatus)
	}
	if n := nexts.Load(); n != 1 {
		t.Fatalf("next called %d times", n)
	}
}

// Next may dial again: the second dial's callee answers.
func TestNextDialsAgain(t *testing.T) {
	var e *env
	next := func(ctx context.Context, f b2bua.Failure) *b2bua.Target {
		legs := b2bua.LegsFor(e.reg.Lookup(tenant, "103"), e.srv.ConnectionOpen, "103", "103")
		return &b2bua.Target{Legs: legs, CallerID: b2bua.Identity{User: "101"}, Meta: b2bua.Meta{Domain: domain}}
	}
	e = newEnv(t, envOpts{route: appRouter(nil, next)})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	carol := e.phone("udp", "carol", "carol-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Reject, Status: 486})
	call, in := answered(t, alice, carol, "102")
	exchange(t, call.Media(), in.Media(), 10, "n")
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "carol BYE")
	ev := e.rec.ended(t)
	if legs := ev.Call.Legs; len(legs) != 2 || legs[0].Cause != calls.CauseBusy || legs[1].Target != "103" || !legs[1].Won {
		t.Fatalf("legs %+v", legs)
	}
}

// A call the caller cancels never asks Next.
func TestCancelledCallNeverCallsNext(t *testing.T) {
	var nexts atomic.Int32
	next := func(ctx context.Context, f b2bua.Failure) *b2bua.Target {
		nexts.Add(1)
		return &b2bua.Target{App: newTestApp()}
	}
	e := newEnv(t, envOpts{route: appRouter(nil, next)})
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
	if n := nexts.Load(); n != 0 {
		t.Fatalf("next called %d times after a cancel", n)
	}
}

// An application's call keeps the caller side's session timer (a caller
// that stops refreshing is hung up, the application's context cancelled)
// and the media timeout (a caller that sends no RTP).
func TestAppSessionTimerAndMediaTimeout(t *testing.T) {
	t.Run("session timer", func(t *testing.T) {
		app := newTestApp()
		e := newEnv(t, envOpts{route: appRouter(app, nil), minSE: time.Second})
		alice := e.phone("udp", "alice", "alice-pw")
		call := alice.DialWith(ctxT(t), appExt, hdr("Supported", "timer"), hdr("Session-Expires", "3;refresher=uac"), hdr("Min-SE", "1"))
		if s := final(t, call); s != 200 {
			t.Fatalf("final %d", s)
		}
		if got := headerValue(call.Response(), "Session-Expires"); got != "3;refresher=uac" {
			t.Fatalf("2xx Session-Expires %q", got)
		}
		app.wait(t)
		waitCh(t, app.cancelled, "application context cancelled")
		waitCh(t, call.Ended(), "BYE from the PBX")
		if ev := e.rec.ended(t); ev.Call.Reason != b2bua.ReasonSessionExpired {
			t.Fatalf("ended %s %q", ev.Call.Cause, ev.Call.Reason)
		}
	})
	t.Run("media timeout", func(t *testing.T) {
		app := newTestApp()
		e := newEnv(t, envOpts{route: appRouter(app, nil), mediaTimeout: time.Second})
		alice := e.phone("udp", "alice", "alice-pw")
		call := alice.Dial(ctxT(t), appExt)
		if s := final(t, call); s != 200 {
			t.Fatalf("final %d", s)
		}
		app.wait(t)
		waitCh(t, app.cancelled, "application context cancelled")
		waitCh(t, call.Ended(), "BYE from the PBX")
		if ev := e.rec.ended(t); ev.Call.Reason != "media timeout" {
			t.Fatalf("ended %s %q", ev.Call.Cause, ev.Call.Reason)
		}
	})
}

// A ring timeout with a Next returning an application: the callee's early
// media stops reaching the caller, who then hears the application.
func TestNextAfterRingTimeoutStopsEarlyMedia(t *testing.T) {
	app := newTestApp()
	var got atomic.Value
	next := func(ctx context.Context, f b2bua.Failure) *b2bua.Target {
		got.Store(f)
		return &b2bua.Target{App: app, Name: "voicemail"}
	}
	e := newEnv(t, envOpts{route: appRouterRing(app, next, time.Second)})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	bob.SetBehaviour(siptest.Behaviour{Mode: siptest.Ring, EarlyMedia: true})
	call := alice.Dial(ctxT(t), "102")
	in := bob.WaitIncoming(wait)
	waitCh(t, in.EarlyMedia(), "callee's early media")
	waitCh(t, call.EarlyMedia(), "early media")
	exchange(t, in.Media(), call.Media(), 5, "ring")
	if s := final(t, call); s != 200 {
		t.Fatalf("final %d, want 200 from the application", s)
	}
	waitCh(t, in.Cancelled(), "callee cancelled")
	ch := app.wait(t).ch
	if f, _ := got.Load().(b2bua.Failure); f.Cause != calls.CauseNoAnswer || f.Status != 480 {
		t.Fatalf("next called with %+v", f)
	}
	before := len(call.Media().Received())
	for range 5 {
		if _, err := in.Media().Send([]byte("ringback-after-answer")); err != nil {
			t.Fatal(err)
		}
	}
	play(t, ch, call.Media(), rtpcore.PayloadPCMA, pattern(320, 6))
	for _, p := range call.Media().Received()[before:] {
		if string(p.Payload) == "ringback-after-answer" {
			t.Fatal("the failed leg's early media still reaches the caller")
		}
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if ev := e.rec.ended(t); len(ev.Call.Legs) != 2 || ev.Call.Legs[0].Won || ev.Call.Legs[1].Kind != b2bua.KindLocal {
		t.Fatalf("legs %+v", ev.Call.Legs)
	}
}
