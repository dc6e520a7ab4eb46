package appliance

import (
	"context"
	"log/slog"
	"net/netip"

	"pbx/appliance/config"
	"pbx/appliance/mobile"
	"pbx/appliance/tenant"
	"pbx/appliance/webhook"
	"pbx/db"
	"pbx/web/api"
	mobileweb "pbx/web/mobile"
)

// mobileDirectory lets the device sessions find accounts in the tenant
// directory.
type mobileDirectory struct{ dir *tenant.Directory }

func mobileAccount(t *tenant.Tenant, a *tenant.Account) mobile.Account {
	return mobile.Account{Tenant: string(a.Tenant), Username: a.Username, Password: a.Password, Extension: a.Extension,
		DisplayName: a.DisplayName, Domain: t.Domain}
}

func (d mobileDirectory) Account(domain, username string) (mobile.Account, bool) {
	t := d.dir.ByDomain(domain)
	if t == nil {
		return mobile.Account{}, false
	}
	a, ok := t.Accounts[username]
	if !ok {
		return mobile.Account{}, false
	}
	return mobileAccount(t, a), true
}

func (d mobileDirectory) ByName(tn, username string) (mobile.Account, bool) {
	t := d.dir.Get(tenant.ID(tn))
	if t == nil {
		return mobile.Account{}, false
	}
	a, ok := t.Accounts[username]
	if !ok {
		return mobile.Account{}, false
	}
	return mobileAccount(t, a), true
}

// newSessions opens the device sessions (they live in bbolt, so only with
// a data directory); failed logins go to the guard like SIP digest
// failures.
func newSessions(d *db.DB, dir *tenant.Directory, onAuthFailure func(src netip.AddrPort, domain, username string), log *slog.Logger) (*mobile.Sessions, error) {
	return mobile.NewSessions(mobile.SessionOptions{Store: d.Devices(), Directory: mobileDirectory{dir}, OnAuthFailure: onAuthFailure}, log)
}

// deviceAPI is the device API's configuration; nil without sessions.
func deviceAPI(cfg *config.Config, s *mobile.Sessions, callLog api.CallLog) *mobileweb.Options {
	if s == nil {
		return nil
	}
	return &mobileweb.Options{Sessions: s, CallLog: callLog, RoomServiceURL: func(tn string) string {
		if rs := cfg.RoomServiceFor(cfg.Tenant(tn)); rs != nil {
			return rs.URL
		}
		return ""
	}}
}

// webhookStats reads the webhook dispatcher's counters for the metrics.
type webhookStats struct{ d *webhook.Dispatcher }

func (w webhookStats) WebhookStats(context.Context) (api.WebhookStats, error) {
	st := w.d.Stats()
	return api.WebhookStats{Deliveries: st.Deliveries, Attempts: st.Attempts, Queued: st.Queued, InFlight: st.InFlight,
		Latency: histogram(webhook.LatencyBounds[:], st.LatencyCounts[:], st.LatencySum)}, nil
}
