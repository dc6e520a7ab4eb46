package appliance

import (
	"log/slog"
	"os"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/voicemail"
	"pbx/appliance/voicemail/notice"
)

// hasMailboxes reports whether any tenant declares a mailbox: then the
// voicemail store opens (and its API routes are present).
func hasMailboxes(cfg *config.Config) bool {
	for _, t := range cfg.Tenants {
		if len(t.Mailboxes) > 0 {
			return true
		}
	}
	return false
}

// newVoicemail opens the notice outbox and the voicemail store under
// dataDir, and promotes the messages a crash left being recorded (each gets
// its notice); it runs before any listener opens. onChange is told of every
// change to a mailbox (message-waiting lamps).
func newVoicemail(dataDir string, cfg *config.Config, onChange func(tenant, ext string), log *slog.Logger) (*voicemail.Store, *notice.Outbox, error) {
	out, err := notice.OpenWith(noticeTestKnobs(notice.Options{DataDir: dataDir,
		Settings: notice.ConfigSettings(func() *config.Config { return cfg })}), log.With("component", "notices"))
	if err != nil {
		return nil, nil, err
	}
	emails := map[string]map[string]config.Mailbox{}
	for _, t := range cfg.Tenants {
		if s := cfg.SMTPFor(t); s == nil || s.Host == "" {
			for _, b := range t.Mailboxes {
				if b.Email != "" {
					log.Warn("mailboxes have an email but the tenant has no smtp host: no notices are sent", "tenant", t.Name)
					break
				}
			}
			continue
		}
		for _, b := range t.Mailboxes {
			if b.Email == "" {
				continue
			}
			if emails[t.Name] == nil {
				emails[t.Name] = map[string]config.Mailbox{}
			}
			emails[t.Name][b.Extension] = b
		}
	}
	deposit := func(m voicemail.Message, audio string) {
		b, ok := emails[m.Tenant][m.Extension]
		if !ok {
			return
		}
		n := notice.Notice{Tenant: m.Tenant, Extension: m.Extension, To: b.Email, From: m.From, FromName: m.FromName,
			Duration: time.Duration(m.DurationMS) * time.Millisecond, ReceivedAt: m.ReceivedAt, MessageID: m.ID,
			NoAttach: b.Attach != nil && !*b.Attach, WAV: audio}
		if err := out.Enqueue(n); err != nil {
			log.Error("voicemail notice not queued", "tenant", m.Tenant, "extension", m.Extension, "message", m.ID, "err", err)
		}
	}
	st, err := voicemail.Open(voicemail.Options{DataDir: dataDir, MinMessage: cfg.System.Voicemail.MinMessage.D(),
		OnChange: onChange, OnDeposit: deposit}, log)
	if err != nil {
		return nil, nil, err
	}
	return st, out, nil
}

// envNoticeBackoff is a test knob: the notice outbox's first backoff (it
// doubles to ten times that), in Go syntax; the configuration does not
// expose it.
const envNoticeBackoff = "PBX_TEST_NOTICE_BACKOFF"

func noticeTestKnobs(o notice.Options) notice.Options {
	if d, err := time.ParseDuration(os.Getenv(envNoticeBackoff)); err == nil && d > 0 {
		o.BackoffMin, o.BackoffMax = d, 10*d
	}
	return o
}
