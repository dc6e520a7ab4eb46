package appliance

import (
	"log/slog"
	"net/netip"

	"pbx/appliance/guard"
	"pbx/appliance/logging"
)

// logAuthFailures logs each failed SIP authentication (source, domain and
// user name, cut to a sane length) at info level with a kind, so that a
// guessing run is rate-limited in the log, then passes it on to next.
func logAuthFailures(log *slog.Logger, next func(src netip.AddrPort, domain, username string)) func(src netip.AddrPort, domain, username string) {
	return func(src netip.AddrPort, domain, username string) {
		log.Info("authentication failed", "src", src.String(), "domain", clip(domain), "username", clip(username), logging.KindKey, guard.KindAuthFailure)
		next(src, domain, username)
	}
}

// clip cuts a remote party's string to 64 bytes for the log.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
