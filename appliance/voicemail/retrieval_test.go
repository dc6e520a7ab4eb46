package voicemail

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

var boxes = []config.Mailbox{{Extension: "201", PIN: "1234"}, {Extension: "202"}, {Extension: "203", PIN: "999"}}

// newSession is a retrieval of acme over a fake channel, caller account
// 201, asking for extension ext ("" asks for a mailbox).
func newSession(t *testing.T, e *testEnv, ext string, callerExt string) (*retrieval, *fakeChannel) {
	ch := newFake(t, e.prompts)
	ch.call.Caller = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Username: "u" + callerExt, Extension: callerExt}
	by := map[string]config.Mailbox{}
	for _, b := range boxes {
		by[b.Extension] = b
	}
	r := &retrieval{set: e.set, tenant: "acme", boxes: by, ext: ext, call: ch.call, sp: speaker{ch: ch, prompts: e.prompts}}
	return r, ch
}

func step(t *testing.T, f func(context.Context) (state, error)) state {
	t.Helper()
	st, err := f(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestLoginOwnAccountSkipsPIN(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	r, ch := newSession(t, e, "201", "201")
	if st := step(t, r.login); st != stCount || r.box.Extension != "201" || len(ch.played) != 0 {
		t.Fatalf("state %d, box %q, played %v", st, r.box.Extension, ch.played)
	}
}

func TestLoginOtherAccountAsksPIN(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	r, ch := newSession(t, e, "201", "202")
	ch.after["vm-enter-pin"] = "1234#"
	if st := step(t, r.login); st != stCount || r.box.Extension != "201" {
		t.Fatalf("state %d", st)
	}
	if !slices.Equal(ch.playedNames(), []string{"vm-enter-pin"}) {
		t.Fatalf("played %v", ch.playedNames())
	}
	// A mailbox without a PIN opens for anyone of the tenant.
	r, ch = newSession(t, e, "202", "201")
	if st := step(t, r.login); st != stCount || len(ch.played) != 0 {
		t.Fatalf("no PIN: state %d played %v", st, ch.played)
	}
	// A trunk caller is nobody's own account.
	r, ch = newSession(t, e, "201", "201")
	r.call.Caller.Kind = b2bua.KindTrunk
	ch.after["vm-enter-pin"] = "1234"
	if st := step(t, r.login); st != stCount || !slices.Equal(ch.playedNames(), []string{"vm-enter-pin"}) {
		t.Fatalf("trunk: state %d played %v", st, ch.playedNames())
	}
}

func TestLoginThreeWrongPINs(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	var failures []string
	e.set.OnAuthFailure = func(c b2bua.CallInfo, tenant, mailbox string) {
		failures = append(failures, string(c.ID)+" "+tenant+"/"+mailbox)
	}
	r, ch := newSession(t, e, "201", "202")
	ch.press("1111#")
	ch.after["vm-wrong-pin"] = "2222#"
	st := step(t, r.login)
	if st != stGoodbye || len(failures) != 1 || failures[0] != string(ch.call.ID)+" acme/201" {
		t.Fatalf("state %d, failures %v", st, failures)
	}
	// The third attempt timed out: nothing typed is wrong too.
	// (the first two PIN prompts were cut by the keys typed ahead)
	if got := ch.playedNames(); !slices.Equal(got, []string{"vm-wrong-pin", "vm-wrong-pin", "vm-enter-pin"}) {
		t.Fatalf("played %v", got)
	}
	if st := step(t, r.goodbye); st != stEnd || ch.playedNames()[3] != "vm-goodbye" {
		t.Fatalf("goodbye: %d %v", st, ch.playedNames())
	}
}

func TestLoginOtherMailboxAsksNumberThenPIN(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	// Even the caller's own mailbox asks its PIN through *98.
	r, ch := newSession(t, e, "", "203")
	ch.after["vm-enter-mailbox"] = "203#"
	ch.after["vm-enter-pin"] = "999#"
	if st := step(t, r.login); st != stCount || r.box.Extension != "203" {
		t.Fatalf("state %d box %q", st, r.box.Extension)
	}
	if !slices.Equal(ch.playedNames(), []string{"vm-enter-mailbox", "vm-enter-pin"}) {
		t.Fatalf("played %v", ch.playedNames())
	}
	// An unknown mailbox is asked its PIN as well, and fails like a wrong one.
	var failures int
	e.set.OnAuthFailure = func(b2bua.CallInfo, string, string) { failures++ }
	r, ch = newSession(t, e, "", "201")
	ch.after["vm-enter-mailbox"] = "777#"
	ch.after["vm-enter-pin"] = "1234#"
	ch.after["vm-wrong-pin"] = "201#1234#" // typed ahead: the second round's prompts are cut
	if st := step(t, r.login); st != stCount || r.box.Extension != "201" || failures != 0 {
		t.Fatalf("state %d box %q failures %d played %v", st, r.box.Extension, failures, ch.playedNames())
	}
	if got := ch.playedNames(); !slices.Equal(got, []string{"vm-enter-mailbox", "vm-enter-pin", "vm-wrong-pin"}) {
		t.Fatalf("played %v", got)
	}
}

func TestCountSaysNewAndSaved(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	r, ch := newSession(t, e, "201", "201")
	r.box = boxes[0]
	if st := step(t, r.count); st != stMenu || !slices.Equal(ch.playedNames(), []string{"vm-you-have", "vm-no-messages"}) {
		t.Fatalf("empty: %d %v", st, ch.playedNames())
	}
	now := time.Now().UTC()
	for i := range 23 {
		m := e.put(t, "acme", "201", now.Add(-time.Duration(i+1)*time.Minute), "1", 160)
		if i < 2 {
			_ = e.store.Save("acme", "201", m.ID)
		}
	}
	ch.reset()
	step(t, r.count)
	want := []string{"vm-you-have", "20", "1", "vm-new", "vm-messages", "2", "vm-saved", "vm-messages"}
	if !slices.Equal(ch.playedNames(), want) {
		t.Fatalf("played %v, want %v", ch.playedNames(), want)
	}
	// A key during the count goes to the menu.
	ch.reset()
	ch.press("1")
	step(t, r.count)
	if r.pending != '1' {
		t.Fatalf("pending %q", r.pending)
	}
}

func TestMenuKeys(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	for _, c := range []struct {
		key  string
		want state
		say  string
	}{{"1", stPlay, ""}, {"0", stOptions, ""}, {"#", stGoodbye, ""}, {"*", stMenu, "vm-help"}, {"8", stMenu, "vm-invalid"}} {
		r, ch := newSession(t, e, "201", "201")
		r.box = boxes[0]
		ch.after["vm-menu"] = c.key
		st := step(t, r.menu)
		got := ch.playedNames()
		if st != c.want || got[0] != "vm-menu" || c.say != "" && (len(got) < 2 || got[1] != c.say) {
			t.Errorf("key %s: state %d played %v", c.key, st, got)
		}
	}
	// No answer: the menu three times, then goodbye.
	r, ch := newSession(t, e, "201", "201")
	if st := step(t, r.menu); st != stGoodbye || !slices.Equal(ch.playedNames(), []string{"vm-menu", "vm-menu", "vm-menu"}) {
		t.Fatalf("timeouts: %d %v", st, ch.playedNames())
	}
}

func TestPlayOrderEnvelopeAndHeardToEnd(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	loc := time.FixedZone("X", 3600)
	now := time.Date(2026, 11, 21, 15, 0, 0, 0, loc)
	e.set.Now = func() time.Time { return now }
	e.set.Location = func(string) *time.Location { return loc }
	savedOld := e.put(t, "acme", "201", now.Add(-72*time.Hour), "5550001", 1600)
	_ = e.store.Save("acme", "201", savedOld.ID)
	newOld := e.put(t, "acme", "201", now.Add(-25*time.Hour), "sip:5550002@pbx.example", 800)
	newNew := e.put(t, "acme", "201", now.Add(-2*time.Hour-55*time.Minute), "5550003", 480)
	r, ch := newSession(t, e, "201", "201")
	r.box = boxes[0]
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	if len(r.msgs) != 3 || r.msgs[0].ID != newNew.ID || r.msgs[1].ID != newOld.ID || r.msgs[2].ID != savedOld.ID {
		t.Fatalf("order: %+v", r.msgs)
	}
	if st := step(t, r.play); st != stMessageMenu {
		t.Fatalf("state %d", st)
	}
	// Received 12:05 local today.
	want := []string{"vm-message", "1", "vm-received", "today", "at", "12", "oh", "5", "pm", "vm-from", "5", "5", "5", "0", "0", "0", "3", "audio:480"}
	if !slices.Equal(ch.playedNames(), want) {
		t.Fatalf("played %v\nwant   %v", ch.playedNames(), want)
	}
	if m, _ := e.store.Get("acme", "201", newNew.ID); m.Folder != FolderSaved || m.HeardAt == nil {
		t.Fatalf("heard to its end: %+v", m)
	}
	// The next one: yesterday, a URI caller read by its number.
	r.idx = 1
	ch.reset()
	step(t, r.play)
	if got := ch.playedNames(); !slices.Equal(got[3:5], []string{"yesterday", "at"}) || !slices.Contains(got, "vm-from") || got[len(got)-2] != "2" {
		t.Fatalf("played %v", got)
	}
	// Cut by a key: not saved, the key goes to the message menu.
	m2 := e.put(t, "acme", "202", now, "1", 8000)
	r2, ch2 := newSession(t, e, "202", "202")
	r2.box = boxes[1]
	_ = r2.load()
	ch2.after["vm-from"] = "7"
	step(t, r2.play)
	if m, _ := e.store.Get("acme", "202", m2.ID); m.Folder != FolderNew || r2.pending != '7' {
		t.Fatalf("cut message: %+v pending %q", m, r2.pending)
	}
}

func TestMessageMenuActions(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	now := time.Now().UTC()
	var ids []string
	for i := range 3 {
		ids = append(ids, e.put(t, "acme", "201", now.Add(-time.Duration(3-i)*time.Minute), "1", 160).ID)
	}
	slices.Reverse(ids) // newest first, the playing order
	r, ch := newSession(t, e, "201", "201")
	r.box = boxes[0]
	_ = r.load()
	act := func(key string) state {
		ch.reset()
		ch.press(key)
		return step(t, r.messageMenu)
	}
	if st := act("6"); st != stPlay || r.idx != 1 {
		t.Fatalf("6: %d idx %d", st, r.idx)
	}
	if st := act("4"); st != stPlay || r.idx != 0 {
		t.Fatalf("4: %d idx %d", st, r.idx)
	}
	if st := act("4"); st != stPlay || r.idx != 0 {
		t.Fatalf("4 at the first: %d idx %d", st, r.idx)
	}
	if st := act("5"); st != stPlay || r.idx != 0 {
		t.Fatalf("5: %d idx %d", st, r.idx)
	}
	if st := act("9"); st != stPlay || r.idx != 1 || !slices.Contains(ch.playedNames(), "vm-saved-ok") {
		t.Fatalf("9: %d idx %d %v", st, r.idx, ch.playedNames())
	}
	if m, _ := e.store.Get("acme", "201", ids[0]); m.Folder != FolderSaved {
		t.Fatalf("9 did not save: %+v", m)
	}
	if st := act("7"); st != stPlay || r.idx != 1 || len(r.msgs) != 2 || !slices.Contains(ch.playedNames(), "vm-deleted") {
		t.Fatalf("7: %d idx %d %d %v", st, r.idx, len(r.msgs), ch.playedNames())
	}
	if _, err := e.store.Get("acme", "201", ids[1]); err == nil {
		t.Fatal("7 did not delete")
	}
	if st := act("#"); st != stMenu {
		t.Fatalf("#: %d", st)
	}
	if st := act("3"); st != stMessageMenu || !slices.Contains(ch.playedNames(), "vm-invalid") {
		t.Fatalf("3: %d %v", st, ch.playedNames())
	}
	// Past the last message: "no messages" and back to the menu.
	r.idx = 2
	ch.reset()
	if st := step(t, r.play); st != stMenu || !slices.Equal(ch.playedNames(), []string{"vm-no-messages"}) {
		t.Fatalf("past the end: %d %v", st, ch.playedNames())
	}
	// No answer after a message: options three times, then goodbye.
	ch.reset()
	if st := step(t, r.messageMenu); st != stGoodbye || len(ch.playedNames()) != 3 {
		t.Fatalf("timeouts: %d %v", st, ch.playedNames())
	}
}

func TestOptionsRecordAndEraseGreeting(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{SilenceTimeout: config.Duration(100 * time.Millisecond)})
	r, ch := newSession(t, e, "201", "201")
	r.box = boxes[0]
	ch.after["vm-record-greeting"] = "1"
	ch.frames = concat(loud(20, 2500), quiet(2), loud(5, 2500)) // then silence ends it
	if st := step(t, r.options); st != stOptions {
		t.Fatalf("state %d", st)
	}
	if got := ch.playedNames(); !slices.Equal(got, []string{"vm-record-greeting", "vm-beep", "vm-saved-ok"}) {
		t.Fatalf("played %v", got)
	}
	g := e.store.Greeting("acme", "201")
	if len(g) != 27*frameLen || g[0] != 2500 {
		t.Fatalf("greeting of %d samples", len(g))
	}
	if fs := e.files(t, "acme", "201"); !slices.Equal(fs, []string{GreetingFile}) {
		t.Fatalf("files %v", fs)
	}
	ch.reset()
	ch.press("2")
	if st := step(t, r.options); st != stOptions || e.store.HasGreeting("acme", "201") || !slices.Contains(ch.playedNames(), "vm-greeting-erased") {
		t.Fatalf("erase: %d %v", st, ch.playedNames())
	}
	ch.reset()
	ch.press("#")
	if st := step(t, r.options); st != stMenu {
		t.Fatalf("#: %d", st)
	}
	// A greeting ended by a hang-up keeps the old one (none here).
	ch.reset()
	ch.press("1")
	ch.frames, ch.then = loud(10, 2500), "hangup"
	if _, err := r.options(context.Background()); err == nil || e.store.HasGreeting("acme", "201") {
		t.Fatalf("hang-up while recording: %v, greeting %v", err, e.store.HasGreeting("acme", "201"))
	}
	if fs := e.files(t, "acme", "201"); len(fs) != 0 {
		t.Fatalf("files %v", fs)
	}
}

// TestRetrievalWholeCall runs the application as the PBX would: the owner
// dials in, hears the count, plays the message, deletes it and leaves.
func TestRetrievalWholeCall(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	m := e.put(t, "acme", "201", time.Now().UTC().Add(-time.Minute), "5550003", 160)
	ch := newFake(t, e.prompts)
	ch.call.Caller = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Extension: "201"}
	ch.after["vm-messages"] = "1"
	ch.after["audio:160"] = "7"
	ch.after["vm-deleted"] = "#"
	ch.after["vm-menu"] = "#"
	runApp(t, NewRetrieval(e.set, "acme", boxes, "201"), ch)
	if !ch.hidden {
		t.Fatal("HideDigits was not called")
	}
	got := strings.Join(ch.playedNames(), " ")
	for _, want := range []string{"vm-you-have 1 vm-new vm-messages", "audio:160", "vm-deleted", "vm-goodbye"} {
		if !strings.Contains(got, want) {
			t.Fatalf("played %q, lacks %q", got, want)
		}
	}
	if _, err := e.store.Get("acme", "201", m.ID); err == nil {
		t.Fatal("the message was not deleted")
	}
}

func TestSpokenNumbersDatesTimes(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 19: "19", 20: "20", 42: "40 2", 100: "1 hundred", 305: "3 hundred 5", 999: "9 hundred 90 9", 1234: "1 2 3 4"} {
		if got := strings.Join(numberWords(n), " "); got != want {
			t.Errorf("numberWords(%d) = %q, want %q", n, got, want)
		}
	}
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC) // a Saturday
	for at, want := range map[time.Time]string{
		now.Add(-time.Hour):            "today",
		now.Add(-11 * time.Hour):       "yesterday",
		now.Add(-3 * 24 * time.Hour):   "wednesday",
		now.Add(-7 * 24 * time.Hour):   "november 14",
		now.Add(-30 * 24 * time.Hour):  "october 20 2",
		now.Add(-400 * 24 * time.Hour): "october 17",
	} {
		if got := strings.Join(dateWords(at, now), " "); got != want {
			t.Errorf("dateWords(%s) = %q, want %q", at, got, want)
		}
	}
	for hm, want := range map[[2]int]string{{0, 0}: "12 am", {12, 0}: "12 pm", {9, 5}: "9 oh 5 am", {23, 59}: "11 50 9 pm", {13, 30}: "1 30 pm"} {
		at := time.Date(2026, 1, 1, hm[0], hm[1], 0, 0, time.UTC)
		if got := strings.Join(timeWords(at), " "); got != want {
			t.Errorf("timeWords(%02d:%02d) = %q, want %q", hm[0], hm[1], got, want)
		}
	}
}

func TestLoginUnknownOwnMailboxIsNoAuthFailure(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	failures := 0
	e.set.OnAuthFailure = func(b2bua.CallInfo, string, string) { failures++ }
	r, ch := newSession(t, e, "250", "250")
	if st := step(t, r.login); st != stGoodbye || failures != 0 || len(ch.played) != 0 {
		t.Fatalf("state %d failures %d played %v", st, failures, ch.played)
	}
}

func TestRetrievalWithoutPromptsStillWorks(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	e.prompts.skip = map[string]bool{}
	for _, n := range []string{"vm-you-have", "vm-new", "vm-messages", "vm-menu", "vm-goodbye", "1", "vm-no-messages"} {
		e.prompts.skip[n] = true
	}
	ch := newFake(t, e.prompts)
	ch.call.Caller = b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Extension: "202"}
	ch.press("#") // goodbye from the menu
	runApp(t, NewRetrieval(e.set, "acme", boxes, "202"), ch)
	if len(ch.played) != 0 {
		t.Fatalf("played %v", ch.played)
	}
}

func TestDeleteOfAMessageAlreadyGone(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	m := e.put(t, "acme", "201", time.Now().UTC(), "1", 160)
	r, ch := newSession(t, e, "201", "201")
	r.box = boxes[0]
	_ = r.load()
	if err := e.store.Delete("acme", "201", m.ID); err != nil { // through the API, meanwhile
		t.Fatal(err)
	}
	ch.press("7")
	if st := step(t, r.messageMenu); st != stPlay || len(r.msgs) != 0 || !slices.Contains(ch.playedNames(), "vm-deleted") {
		t.Fatalf("state %d, %d messages, played %v", st, len(r.msgs), ch.playedNames())
	}
}
