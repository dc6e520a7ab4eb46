package voicemail

import (
	"slices"
	"testing"
	"time"

	"pbx/appliance/config"
)

func box201() config.Mailbox { return config.Mailbox{Extension: "201", PIN: "1234"} }

func depositOnce(t *testing.T, e *testEnv, box config.Mailbox, ch *fakeChannel) []Message {
	t.Helper()
	runApp(t, NewDeposit(e.set, "acme", box), ch)
	ms, err := e.store.List("acme", box.Extension)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestDepositUntilHangupTrimsTrailingSilence(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	ch := newFake(t, e.prompts)
	speech := concat(loud(10, 2000), quiet(3), loud(10, 1500))
	ch.frames, ch.then = concat(speech, quiet(15)), "hangup"
	ms := depositOnce(t, e, box201(), ch)
	if !slices.Equal(ch.playedNames(), []string{"vm-greeting", "vm-beep"}) {
		t.Fatalf("played %v", ch.playedNames())
	}
	if len(ms) != 1 {
		t.Fatalf("messages: %+v", ms)
	}
	m := ms[0]
	if m.ID != string(ch.call.ID) || m.From != "5551234" || m.FromName != "Alice" || m.CallID != "sip-1" || m.DurationMS != 460 {
		t.Fatalf("message: %+v", m)
	}
	pcm, _ := e.store.Samples("acme", "201", m.ID)
	if !slices.Equal(pcm, flat(speech)) {
		t.Fatalf("stored %d samples, want the %d of speech (inner silence kept, trailing cut)", len(pcm), len(flat(speech)))
	}
	if len(e.deposit) != 1 || e.deposit[0].ID != m.ID {
		t.Fatalf("OnDeposit: %+v", e.deposit)
	}
	if fs := e.files(t, "acme", "201"); len(fs) != 2 {
		t.Fatalf("files: %v", fs)
	}
}

func TestDepositEndsOnSilenceTimeout(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{SilenceTimeout: config.Duration(200 * time.Millisecond)})
	ch := newFake(t, e.prompts)
	ch.frames = loud(25, 2000) // then silence forever: only the timeout ends it
	ms := depositOnce(t, e, box201(), ch)
	if len(ms) != 1 || ms[0].DurationMS != 500 {
		t.Fatalf("messages: %+v", ms)
	}
	select {
	case <-ch.done:
		t.Fatal("the caller did not hang up; the application ended the call")
	default:
	}
}

func TestDepositShorterThanMinMessageLeavesNothing(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{MinMessage: config.Duration(time.Second)})
	ch := newFake(t, e.prompts)
	ch.frames, ch.then = concat(loud(40, 2000), quiet(20)), "hangup" // 0.8 s of speech, 1.2 s in all
	if ms := depositOnce(t, e, box201(), ch); len(ms) != 0 {
		t.Fatalf("messages: %+v", ms)
	}
	if fs := e.files(t, "acme", "201"); len(fs) != 0 {
		t.Fatalf("files left: %v", fs)
	}
	if len(e.deposit) != 0 {
		t.Fatal("a discarded message was notified")
	}
	// All silence: nothing either, even without a minimum.
	e2 := newTestEnv(t, config.Voicemail{})
	ch2 := newFake(t, e2.prompts)
	ch2.frames, ch2.then = quiet(30), "hangup"
	if ms := depositOnce(t, e2, box201(), ch2); len(ms) != 0 {
		t.Fatalf("silent message kept: %+v", ms)
	}
}

func TestDepositCutAtMaxMessage(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{MaxMessage: config.Duration(time.Minute)})
	ch := newFake(t, e.prompts)
	ch.frames, ch.then = loud(100, 2000), "hangup"
	box := box201()
	box.MaxMessage = config.Duration(time.Second) // the mailbox's own wins
	ms := depositOnce(t, e, box, ch)
	if len(ms) != 1 || ms[0].DurationMS != 1000 {
		t.Fatalf("messages: %+v", ms)
	}
	// The System's applies when the mailbox has none.
	e.set.System.MaxMessage = config.Duration(300 * time.Millisecond)
	ch2 := newFake(t, e.prompts)
	ch2.frames, ch2.then = loud(100, 2000), "hangup"
	ms = depositOnce(t, e, box201(), ch2)
	if len(ms) != 2 || ms[0].DurationMS != 300 {
		t.Fatalf("messages: %+v", ms)
	}
}

func TestDepositHashSkipsOwnGreetingAndEndsMessage(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	g, _ := e.store.BeginGreeting("acme", "201")
	_ = g.Write(flat(loud(500, 500))) // ten seconds
	if _, err := g.Commit(80000); err != nil {
		t.Fatal(err)
	}
	ch := newFake(t, e.prompts)
	ch.press("#") // pressed during the greeting
	ch.frames, ch.then = loud(10, 2000), "#"
	ms := depositOnce(t, e, box201(), ch)
	if !slices.Equal(ch.played, []string{"audio:80000!", "vm-beep"}) {
		t.Fatalf("played %v: want the own greeting cut by #, then the beep", ch.played)
	}
	if len(ms) != 1 || ms[0].DurationMS != 200 {
		t.Fatalf("messages: %+v", ms)
	}
}

func TestDepositFullMailboxTakesNothing(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	now := time.Now().UTC()
	e.put(t, "acme", "201", now.Add(-time.Hour), "1", 160)
	e.put(t, "acme", "201", now.Add(-time.Minute), "2", 160)
	box := box201()
	box.MaxMessages = 2
	ch := newFake(t, e.prompts)
	ch.frames, ch.then = loud(10, 2000), "hangup"
	ms := depositOnce(t, e, box, ch)
	if !slices.Equal(ch.playedNames(), []string{"vm-full"}) || len(ms) != 2 {
		t.Fatalf("played %v, %d messages", ch.playedNames(), len(ms))
	}
	if fs := e.files(t, "acme", "201"); len(fs) != 4 {
		t.Fatalf("files: %v", fs)
	}
}

func TestDepositMissingPromptsAreSkipped(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	e.prompts.skip["vm-greeting"], e.prompts.skip["vm-beep"] = true, true
	ch := newFake(t, e.prompts)
	ch.frames, ch.then = loud(10, 2000), "hangup"
	if ms := depositOnce(t, e, box201(), ch); len(ms) != 1 || len(ch.played) != 0 {
		t.Fatalf("played %v, messages %+v", ch.played, ms)
	}
}

func TestSilenceDetection(t *testing.T) {
	if !silent(quiet(1)[0]) || !silent(make([]int16, frameLen)) || !silent(nil) {
		t.Fatal("quiet frames are silence")
	}
	if silent(loud(1, 300)[0]) {
		t.Fatal("a frame at level 300 is not silence")
	}
	if !silent(loud(1, SilenceLevel)[0]) || silent(loud(1, SilenceLevel+1)[0]) {
		t.Fatal("the threshold is SilenceLevel")
	}
}
