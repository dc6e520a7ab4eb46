package voicemail

import (
	"context"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// NewDeposit returns the application that takes a message for box of
// tenant: a full mailbox says so (vm-full) and takes nothing; otherwise the
// mailbox's own greeting (else vm-greeting; '#' skips it), vm-beep, then the
// caller's audio until hang-up, '#', maxMessage (the mailbox's, else the
// System's) or silenceTimeout of continuous silence. Trailing silence is
// trimmed; a message shorter than minMessage leaves no file. The message id
// is the call's id.
func NewDeposit(set *Settings, tenant string, box config.Mailbox) b2bua.App {
	return b2bua.AppFunc(func(ctx context.Context, ch b2bua.Channel) calls.Cause {
		d := deposit{set: set, tenant: tenant, box: box, sp: speaker{ch: ch, prompts: set.Prompts}}
		if err := d.run(ctx, ch); err != nil && err != errHangup {
			set.log().Error("voicemail deposit", "tenant", tenant, "extension", box.Extension, "call", ch.Call().ID, "err", err)
		}
		return ""
	})
}

type deposit struct {
	set    *Settings
	tenant string
	box    config.Mailbox
	sp     speaker
}

func (d *deposit) run(ctx context.Context, ch b2bua.Channel) error {
	st, ext := d.set.Store, d.box.Extension
	quota := d.box.MaxMessages
	if quota == 0 {
		quota = 100
	}
	if full, err := st.Full(d.tenant, ext, quota); err != nil || full {
		if _, perr := d.sp.say(ctx, "vm-full"); perr != nil {
			return perr
		}
		return err
	}
	greeting := st.Greeting(d.tenant, ext)
	if greeting == nil {
		greeting = d.set.Prompts.Get("vm-greeting")
	}
	if _, err := d.sp.play(ctx, "#", greeting); err != nil {
		return err
	}
	if _, err := d.sp.play(ctx, "", d.set.Prompts.Get("vm-beep")); err != nil {
		return err
	}
	call := ch.Call()
	from, name := call.Calling()
	rec, err := st.Begin(Message{
		ID: string(call.ID), Tenant: d.tenant, Extension: ext, From: from, FromName: name,
		CallID: call.SIPCallID, ReceivedAt: d.set.now().UTC(),
	})
	if err != nil {
		return err
	}
	lim := limits{max: samplesOf(d.set.maxMessage(d.box)), silence: samplesOf(d.set.System.SilenceTimeout.D())}
	keep, why, err := record(ctx, ch, rec, lim)
	if err != nil {
		_ = rec.Abort()
		return err
	}
	if keep == 0 || time.Duration(keep)*time.Second/sampleRate < d.set.System.MinMessage.D() {
		d.set.log().Info("voicemail: message too short, discarded", "tenant", d.tenant, "extension", ext, "samples", keep)
		return rec.Abort()
	}
	m, err := rec.Commit(keep)
	if err != nil {
		return err
	}
	d.set.log().Info("voicemail: message stored", "tenant", d.tenant, "extension", ext, "id", m.ID, "duration_ms", m.DurationMS, "ended_by", why)
	return nil
}
