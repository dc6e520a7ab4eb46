package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/mobile"
	"pbx/appliance/tenant"
	"pbx/appliance/voicemail"
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
func deviceAPI(cfg *config.Config, s *mobile.Sessions, callLog api.CallLog, vm *voicemail.Store, calls *mobile.Service) *mobileweb.Options {
	if s == nil {
		return nil
	}
	o := &mobileweb.Options{Sessions: s, CallLog: callLog, RoomServiceURL: func(tn string) string {
		if rs := cfg.RoomServiceFor(cfg.Tenant(tn)); rs != nil {
			return rs.URL
		}
		return ""
	}}
	if vm != nil {
		o.Voicemail = newDeviceVoicemail(cfg, vm)
	}
	if calls != nil {
		o.Calls = calls
	}
	return o
}

// webhookStats reads the webhook dispatcher's counters for the metrics.
type webhookStats struct{ d *webhook.Dispatcher }

func (w webhookStats) WebhookStats(context.Context) (api.WebhookStats, error) {
	st := w.d.Stats()
	return api.WebhookStats{Deliveries: st.Deliveries, Attempts: st.Attempts, Queued: st.Queued, InFlight: st.InFlight,
		Latency: histogram(webhook.LatencyBounds[:], st.LatencyCounts[:], st.LatencySum)}, nil
}

// deviceVoicemail is a device's own mailbox for the device API: the
// extension's messages in the voicemail store; an extension without a
// mailbox has none to show (404).
type deviceVoicemail struct {
	st    *voicemail.Store
	boxes map[string]map[string]bool // tenant -> extensions with a mailbox
}

func newDeviceVoicemail(cfg *config.Config, st *voicemail.Store) *deviceVoicemail {
	d := &deviceVoicemail{st: st, boxes: map[string]map[string]bool{}}
	for _, t := range cfg.Tenants {
		d.boxes[t.Name] = map[string]bool{}
		for _, b := range t.Mailboxes {
			d.boxes[t.Name][b.Extension] = true
		}
	}
	return d
}

func (d *deviceVoicemail) check(tenant, ext string) error {
	if !d.boxes[tenant][ext] {
		return fmt.Errorf("%w: extension %s has no mailbox", api.ErrNotFound, ext)
	}
	return nil
}

// found maps the store's not-found to the API's.
func found(err error) error {
	if errors.Is(err, voicemail.ErrNotFound) || errors.Is(err, voicemail.ErrInvalid) {
		return fmt.Errorf("%w: no such message", api.ErrNotFound)
	}
	return err
}

func (d *deviceVoicemail) List(_ context.Context, tenant, ext string) (any, error) {
	if err := d.check(tenant, ext); err != nil {
		return nil, err
	}
	msgs, err := d.st.List(tenant, ext)
	if err != nil {
		return nil, found(err)
	}
	if msgs == nil {
		msgs = []voicemail.Message{}
	}
	return struct {
		Messages []voicemail.Message `json:"messages"`
	}{msgs}, nil
}

func (d *deviceVoicemail) Get(_ context.Context, tenant, ext, id string) (any, error) {
	if err := d.check(tenant, ext); err != nil {
		return nil, err
	}
	m, err := d.st.Get(tenant, ext, id)
	if err != nil {
		return nil, found(err)
	}
	return m, nil
}

func (d *deviceVoicemail) Audio(_ context.Context, tenant, ext, id string) (io.ReadSeekCloser, time.Time, error) {
	if err := d.check(tenant, ext); err != nil {
		return nil, time.Time{}, err
	}
	f, _, err := d.st.OpenAudio(tenant, ext, id)
	if err != nil {
		return nil, time.Time{}, found(err)
	}
	var mod time.Time
	if fi, err := f.Stat(); err == nil {
		mod = fi.ModTime()
	}
	return f, mod, nil
}

func (d *deviceVoicemail) Delete(_ context.Context, tenant, ext, id string) error {
	if err := d.check(tenant, ext); err != nil {
		return err
	}
	return found(d.st.Delete(tenant, ext, id))
}

// ringingHooks sends the mobile offers' webhooks: mobile.ringing returns
// once its request is on the wire (the leg's INVITE follows it), within
// the offer's own bound; other events are queued.
type ringingHooks struct{ d *webhook.Dispatcher }

// ringingWait bounds how long an offer waits for mobile.ringing to leave.
const ringingWait = 2 * time.Second

func (h ringingHooks) Send(tenant, event string, data any) error {
	if event != mobile.EventRinging {
		return h.d.Send(tenant, event, data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ringingWait)
	defer cancel()
	return h.d.SendNow(ctx, tenant, event, data)
}
