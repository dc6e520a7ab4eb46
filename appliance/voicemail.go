package appliance

import (
	"log/slog"

	"pbx/appliance/config"
	"pbx/appliance/voicemail"
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

// newVoicemail opens the voicemail store under dataDir and promotes the
// messages a crash left being recorded; it runs before any listener opens.
func newVoicemail(dataDir string, cfg *config.Config, log *slog.Logger) (*voicemail.Store, error) {
	return voicemail.Open(voicemail.Options{DataDir: dataDir, MinMessage: cfg.System.Voicemail.MinMessage.D()}, log)
}
