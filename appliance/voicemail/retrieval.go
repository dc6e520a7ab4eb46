package voicemail

import (
	"context"
	"crypto/subtle"
	"errors"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// NewRetrieval returns the application that lets a caller of tenant hear
// and manage a mailbox (DESIGN.md 5.7). With extension set (the feature
// code for one's own mailbox) it opens that mailbox and asks its PIN only
// when one is set and the caller is not the mailbox's own account; with
// extension empty (the code for another mailbox) it asks for a mailbox
// number, then its PIN whenever one is set. Three failed logins say
// goodbye, hang up and call Settings.OnAuthFailure. The caller's keys are
// hidden from the call record from the start.
func NewRetrieval(set *Settings, tenant string, boxes []config.Mailbox, extension string) b2bua.App {
	byExt := make(map[string]config.Mailbox, len(boxes))
	for _, b := range boxes {
		byExt[b.Extension] = b
	}
	return b2bua.AppFunc(func(ctx context.Context, ch b2bua.Channel) calls.Cause {
		ch.HideDigits()
		r := &retrieval{set: set, tenant: tenant, boxes: byExt, ext: extension, call: ch.Call(), sp: speaker{ch: ch, prompts: set.Prompts}}
		if err := r.run(ctx); err != nil && err != errHangup {
			set.log().Error("voicemail retrieval", "tenant", tenant, "call", r.call.ID, "err", err)
		}
		return ""
	})
}

// States of the retrieval menu.
type state int

const (
	stLogin       state = iota // mailbox number and PIN
	stCount                    // "you have 3 new messages"
	stMenu                     // 1 play, 0 options, * help, # goodbye
	stPlay                     // envelope and audio of the current message
	stMessageMenu              // 4 previous, 5 repeat, 6 next, 7 delete, 9 save, # back
	stOptions                  // 1 record greeting, 2 erase greeting, # back
	stGoodbye
	stEnd
)

type retrieval struct {
	set    *Settings
	tenant string
	boxes  map[string]config.Mailbox
	ext    string // the mailbox asked for by the feature code; "" asks
	call   b2bua.CallInfo
	sp     speaker

	box     config.Mailbox // the mailbox once logged in
	pending rune           // a key pressed during a prompt, for the next state
	msgs    []Message      // the messages being played, in playing order
	idx     int
}

func (r *retrieval) run(ctx context.Context) error {
	handlers := map[state]func(context.Context) (state, error){
		stLogin: r.login, stCount: r.count, stMenu: r.menu, stPlay: r.play,
		stMessageMenu: r.messageMenu, stOptions: r.options, stGoodbye: r.goodbye,
	}
	for st := stLogin; st != stEnd; {
		var err error
		if st, err = handlers[st](ctx); err != nil {
			return err
		}
	}
	return nil
}

// take returns the pending key (and clears it), 0 when none.
func (r *retrieval) take() rune {
	d := r.pending
	r.pending = 0
	return d
}

// ownAccount reports whether the caller is the account of extension.
func (r *retrieval) ownAccount(extension string) bool {
	c := r.call.Caller
	return c.Kind != b2bua.KindTrunk && c.Tenant == r.tenant && c.Extension == extension
}

// login asks for the mailbox (when not given) and its PIN (when needed).
func (r *retrieval) login(ctx context.Context) (state, error) {
	if _, ok := r.boxes[r.ext]; r.ext != "" && !ok {
		// Routing sent the caller to a mailbox that does not exist: not
		// the caller's failure.
		r.set.log().Warn("voicemail: no such mailbox", "tenant", r.tenant, "mailbox", r.ext, "call", r.call.ID)
		return stGoodbye, nil
	}
	for tries := 0; ; {
		number := r.ext
		if number == "" {
			var err error
			if number, err = r.ask(ctx, "vm-enter-mailbox"); err != nil {
				return stEnd, err
			}
		}
		box, ok := r.boxes[number]
		if ok && (box.PIN == "" || r.ext != "" && r.ownAccount(number)) {
			r.box = box
			return stCount, nil
		}
		pin, err := r.ask(ctx, "vm-enter-pin")
		if err != nil {
			return stEnd, err
		}
		if ok && subtle.ConstantTimeCompare([]byte(pin), []byte(box.PIN.Reveal())) == 1 {
			r.box = box
			return stCount, nil
		}
		if tries++; tries >= maxTries {
			r.set.log().Warn("voicemail: three failed logins", "tenant", r.tenant, "mailbox", number, "call", r.call.ID)
			if r.set.OnAuthFailure != nil {
				r.set.OnAuthFailure(r.call, r.tenant, number)
			}
			return stGoodbye, nil
		}
		if r.pending, err = r.sp.say(ctx, "vm-wrong-pin"); err != nil {
			return stEnd, err
		}
	}
}

// ask plays a prompt (unless a key is already pending) and reads an entry
// ended by '#' or a pause.
func (r *retrieval) ask(ctx context.Context, name string) (string, error) {
	d := r.take()
	if d == 0 {
		var err error
		if d, err = r.sp.say(ctx, name); err != nil {
			return "", err
		}
	}
	return r.sp.entry(ctx, d, r.set.inputTimeout())
}

// count says how many new and saved messages there are.
func (r *retrieval) count(ctx context.Context) (state, error) {
	n, saved, err := r.set.Store.Counts(r.tenant, r.box.Extension)
	if err != nil {
		return stEnd, err
	}
	words := []string{"vm-you-have"}
	if n == 0 && saved == 0 {
		words = append(words, "vm-no-messages")
	} else {
		words = append(append(words, numberWords(n)...), "vm-new", "vm-messages")
		if saved > 0 {
			words = append(append(words, numberWords(saved)...), "vm-saved", "vm-messages")
		}
	}
	d, err := r.sp.say(ctx, words...)
	r.pending = d
	return stMenu, err
}

// prompt plays names unless a key is pending, then waits for a key; it
// returns 0 after maxTries silent rounds.
func (r *retrieval) prompt(ctx context.Context, names ...string) (rune, error) {
	for round := 0; round < maxTries; round++ {
		if d := r.take(); d != 0 {
			return d, nil
		}
		d, err := r.sp.say(ctx, names...)
		if d != 0 || err != nil {
			return d, err
		}
		if d, err = r.sp.key(ctx, r.set.inputTimeout()); d != 0 || err != nil {
			return d, err
		}
	}
	return 0, nil
}

// menu is the main menu.
func (r *retrieval) menu(ctx context.Context) (state, error) {
	d, err := r.prompt(ctx, "vm-menu")
	if err != nil {
		return stEnd, err
	}
	switch d {
	case 0, '#':
		return stGoodbye, nil
	case '1':
		if err := r.load(); err != nil {
			return stEnd, err
		}
		return stPlay, nil
	case '0':
		return stOptions, nil
	case '*':
		r.pending, err = r.sp.say(ctx, "vm-help")
	default:
		r.pending, err = r.sp.say(ctx, "vm-invalid")
	}
	return stMenu, err
}

// load reads the mailbox in playing order: new messages newest first, then
// saved ones newest first.
func (r *retrieval) load() error {
	ms, err := r.set.Store.mailbox(r.tenant, r.box.Extension)
	if err != nil {
		return err
	}
	r.msgs, r.idx = r.msgs[:0], 0
	for _, folder := range []string{FolderNew, FolderSaved} {
		for _, m := range ms {
			if (m.Folder == FolderSaved) == (folder == FolderSaved) {
				r.msgs = append(r.msgs, m)
			}
		}
	}
	return nil
}

// play reads the current message's envelope and plays it; heard to its end
// it moves to saved. A key pressed meanwhile goes to the message menu.
func (r *retrieval) play(ctx context.Context) (state, error) {
	if r.idx >= len(r.msgs) {
		d, err := r.sp.say(ctx, "vm-no-messages")
		r.pending = d
		return stMenu, err
	}
	m := &r.msgs[r.idx]
	pieces := r.sp.get(envelopeWords(r.idx+1, m, r.set.location(r.tenant), r.set.now())...)
	audio, err := r.set.Store.Samples(r.tenant, r.box.Extension, m.ID)
	if err != nil {
		r.set.log().Warn("voicemail: message audio", "id", m.ID, "err", err)
	}
	d, whole, err := r.sp.playAll(ctx, allKeys, append(pieces, audio)...)
	if err != nil {
		return stEnd, err
	}
	if whole && len(audio) > 0 {
		if err := r.set.Store.Save(r.tenant, r.box.Extension, m.ID); err != nil {
			r.set.log().Warn("voicemail: save heard message", "id", m.ID, "err", err)
		}
		m.Folder = FolderSaved
	}
	r.pending = d
	return stMessageMenu, nil
}

// messageMenu acts on the current message.
func (r *retrieval) messageMenu(ctx context.Context) (state, error) {
	d, err := r.prompt(ctx, "vm-message-options")
	if err != nil {
		return stEnd, err
	}
	switch d {
	case 0:
		return stGoodbye, nil
	case '#':
		return stMenu, nil
	case '4':
		r.idx = max(r.idx-1, 0)
		return stPlay, nil
	case '5':
		return stPlay, nil
	case '6':
		r.idx++
		return stPlay, nil
	case '7':
		m := r.msgs[r.idx]
		// Gone already (deleted through the API meanwhile) is deleted.
		if err := r.set.Store.Delete(r.tenant, r.box.Extension, m.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return stEnd, err
		}
		r.msgs = append(r.msgs[:r.idx], r.msgs[r.idx+1:]...)
		_, err = r.sp.say(ctx, "vm-deleted")
		return stPlay, err
	case '9':
		m := &r.msgs[r.idx]
		if err := r.set.Store.Save(r.tenant, r.box.Extension, m.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return stEnd, err
		}
		m.Folder = FolderSaved
		r.idx++
		_, err = r.sp.say(ctx, "vm-saved-ok")
		return stPlay, err
	}
	r.pending, err = r.sp.say(ctx, "vm-invalid")
	return stMessageMenu, err
}

// options is the mailbox options menu.
func (r *retrieval) options(ctx context.Context) (state, error) {
	d, err := r.prompt(ctx, "vm-record-greeting")
	if err != nil {
		return stEnd, err
	}
	switch d {
	case 0:
		return stGoodbye, nil
	case '#':
		return stMenu, nil
	case '1':
		return stOptions, r.recordGreeting(ctx)
	case '2':
		if err := r.set.Store.EraseGreeting(r.tenant, r.box.Extension); err != nil {
			return stEnd, err
		}
		r.pending, err = r.sp.say(ctx, "vm-greeting-erased")
		return stOptions, err
	}
	r.pending, err = r.sp.say(ctx, "vm-invalid")
	return stOptions, err
}

// recordGreeting records the mailbox's greeting after a beep until '#',
// silence or maxMessage; a hang-up or an empty recording keeps the old one.
func (r *retrieval) recordGreeting(ctx context.Context) error {
	if _, err := r.sp.play(ctx, "", r.set.Prompts.Get("vm-beep")); err != nil {
		return err
	}
	rec, err := r.set.Store.BeginGreeting(r.tenant, r.box.Extension)
	if err != nil {
		return err
	}
	silence := r.set.System.SilenceTimeout.D()
	if silence <= 0 {
		silence = DefaultGreetingSilence
	}
	keep, why, err := record(ctx, r.sp.ch, rec, limits{max: samplesOf(r.set.maxMessage(r.box)), silence: samplesOf(silence)})
	if err != nil || why == endHangup || keep == 0 {
		_ = rec.Abort()
		if err == nil && why == endHangup {
			err = errHangup
		}
		if err == nil {
			r.pending, err = r.sp.say(ctx, "vm-invalid")
		}
		return err
	}
	if _, err := rec.Commit(keep); err != nil {
		return err
	}
	r.pending, err = r.sp.say(ctx, "vm-saved-ok")
	return err
}

// goodbye says goodbye; the PBX then hangs up.
func (r *retrieval) goodbye(ctx context.Context) (state, error) {
	_, err := r.sp.play(ctx, "", r.set.Prompts.Get("vm-goodbye"))
	return stEnd, err
}
