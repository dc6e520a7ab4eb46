package appliance

import (
	"log/slog"
	"net/netip"

	"pbx/appliance/config"
	"pbx/appliance/voicemail"
	"pbx/sipcore/b2bua"
)

// mailboxes is the dial plan's voicemail service: which extensions take
// messages, and the applications that deposit and retrieve them.
type mailboxes struct {
	set     *voicemail.Settings
	enabled bool                                 // System voicemail.enabled
	boxes   map[string]map[string]config.Mailbox // tenant -> extension -> mailbox
	lists   map[string][]config.Mailbox          // tenant -> its mailboxes
	off     map[string]map[string]bool           // tenant -> extension -> Account voicemail: false
}

// newMailboxes serves the mailboxes of cfg from store. A wrong PIN entered
// three times counts as an authentication failure of the caller's source.
func newMailboxes(cfg *config.Config, store *voicemail.Store, prompts voicemail.Prompts, onAuthFailure func(src netip.AddrPort, domain, username string), log *slog.Logger) *mailboxes {
	loc := cfg.LocationFunc()
	domains := map[string]string{}
	m := &mailboxes{
		enabled: cfg.System.Voicemail.Enabled,
		boxes:   map[string]map[string]config.Mailbox{},
		lists:   map[string][]config.Mailbox{},
		off:     map[string]map[string]bool{},
	}
	for _, t := range cfg.Tenants {
		domains[t.Name] = t.Domain
		m.lists[t.Name] = t.Mailboxes
		m.boxes[t.Name] = map[string]config.Mailbox{}
		for _, b := range t.Mailboxes {
			m.boxes[t.Name][b.Extension] = b
		}
	}
	for _, a := range cfg.Accounts {
		if a.Voicemail != nil && !*a.Voicemail {
			if m.off[a.Tenant] == nil {
				m.off[a.Tenant] = map[string]bool{}
			}
			m.off[a.Tenant][a.Extension] = true
		}
	}
	m.set = &voicemail.Settings{
		Store:    store,
		Prompts:  prompts,
		System:   cfg.System.Voicemail,
		Location: loc,
		OnAuthFailure: func(c b2bua.CallInfo, tenant, mailbox string) {
			src, err := netip.ParseAddrPort(c.Source)
			if err != nil || onAuthFailure == nil {
				return
			}
			// Not an account name: the source is charged, no SIP account
			// is locked by PIN guesses.
			onAuthFailure(src, domains[tenant], "voicemail:"+mailbox)
		},
		Log: log,
	}
	return m
}

// Mailbox reports whether tenant's extension takes messages: voicemail is
// enabled, the tenant has a mailbox for it and its account does not say
// voicemail: false.
func (m *mailboxes) Mailbox(tenant, ext string) bool {
	if !m.enabled || m.off[tenant][ext] {
		return false
	}
	_, ok := m.boxes[tenant][ext]
	return ok
}

// Deposit answers a call to leave a message in tenant's ext mailbox.
func (m *mailboxes) Deposit(tenant, ext string) b2bua.App {
	return voicemail.NewDeposit(m.set, tenant, m.boxes[tenant][ext])
}

// Check runs the mailbox menu: ext's mailbox, or the one the caller names
// when ext is empty.
func (m *mailboxes) Check(tenant, ext string, _ b2bua.Caller) b2bua.App {
	return voicemail.NewRetrieval(m.set, tenant, m.lists[tenant], ext)
}
