// Package mwi turns on message waiting (RFC 3842) for the appliance: it
// resolves the mailboxes phones subscribe to from the tenants' mailboxes,
// reads their counts from voicemail, and runs the SIP notifier of
// pbx/sipcore/mwi on the PBX's SIP server.
package mwi

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/config"
	"pbx/appliance/tenant"
	"pbx/sipcore"
	sipmwi "pbx/sipcore/mwi"
	"pbx/sipcore/registrar"
)

// Counts returns the numbers of new and saved messages of a mailbox; the
// voicemail store provides it.
type Counts func(tenant, extension string) (newMessages, saved int)

// Options are the parts the service runs on.
type Options struct {
	SIP   *sipcore.Server // required
	Auth  *registrar.Auth // required: the registrar's digest verifier
	Store sipmwi.Store    // nil keeps subscriptions in memory only
	// Counts reads a mailbox's counts; nil reports 0/0 until SetCounts.
	Counts Counts
	// The guard's hooks, as for REGISTER.
	OnAuthFailure func(src netip.AddrPort, domain, username string)
	OnAuthSuccess func(src netip.AddrPort, domain, username string) bool
}

// Service is message waiting for every tenant.
type Service struct {
	mgr    *sipmwi.Manager
	dir    *tenant.Directory
	boxes  map[tenant.ID]map[string]bool // extensions with a mailbox
	counts atomic.Pointer[Counts]
}

// Enabled reports whether cfg turns message waiting on: voicemail enabled,
// voicemail.mwi true (its default) and at least one tenant with mailboxes.
// Otherwise every SUBSCRIBE is refused 489 as before.
func Enabled(cfg *config.Config) bool {
	vm := cfg.System.Voicemail
	if !vm.Enabled || !vm.MWI {
		return false
	}
	for _, t := range cfg.Tenants {
		if len(t.Mailboxes) > 0 {
			return true
		}
	}
	return false
}

// New builds the service and registers its SUBSCRIBE handler on
// opts.SIP (call it before the SIP server runs, and only when Enabled).
func New(cfg *config.Config, dir *tenant.Directory, opts Options, log *slog.Logger) (*Service, error) {
	s := &Service{dir: dir, boxes: map[tenant.ID]map[string]bool{}}
	for _, t := range cfg.Tenants {
		set := map[string]bool{}
		for _, b := range t.Mailboxes {
			set[b.Extension] = true
		}
		s.boxes[tenant.ID(t.Name)] = set
	}
	s.SetCounts(opts.Counts)
	m, err := sipmwi.New(sipmwi.Options{
		SIP: opts.SIP, Auth: opts.Auth, Mailboxes: mailboxes{s}, Store: opts.Store,
		OnAuthFailure: opts.OnAuthFailure, OnAuthSuccess: opts.OnAuthSuccess,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("message waiting: %w", err)
	}
	s.mgr = m
	opts.SIP.Handle(sip.SUBSCRIBE, m.HandleSubscribe)
	return s, nil
}

// SetCounts sets the function that reads a mailbox's counts (the voicemail
// store's); nil reports 0/0.
func (s *Service) SetCounts(f Counts) {
	if s == nil {
		return
	}
	if f == nil {
		f = func(string, string) (int, int) { return 0, 0 }
	}
	s.counts.Store(&f)
}

// Notify sends every phone subscribed to the mailbox of extension in tenant
// a NOTIFY with its current counts, in the background, and returns how many
// subscriptions there are. The voicemail store calls it on every change. A
// nil Service (message waiting off) does nothing.
func (s *Service) Notify(tenantID, extension string) int {
	if s == nil {
		return 0
	}
	return s.mgr.Notify(key(tenant.ID(tenantID), extension))
}

// Manager is the SIP notifier (for tests and status).
func (s *Service) Manager() *sipmwi.Manager { return s.mgr }

// Run resyncs the restored subscriptions and serves until ctx ends.
func (s *Service) Run(ctx context.Context) error { return s.mgr.Run(ctx) }

func key(t tenant.ID, extension string) string { return string(t) + "/" + extension }

// mailboxes is the notifier's view of the tenants' mailboxes.
type mailboxes struct{ s *Service }

// Resolve finds the mailbox user names in domain: an extension with a
// mailbox, or the username of an account whose extension has one. Only the
// subscriber's own tenant's mailboxes may be watched.
func (b mailboxes) Resolve(user, domain string, sub registrar.Account) (string, error) {
	t := b.s.dir.ByDomain(domain)
	if t == nil {
		return "", sipmwi.ErrNoMailbox
	}
	if string(t.ID) != sub.Tenant {
		return "", sipmwi.ErrForbidden
	}
	ext := user
	if !b.s.boxes[t.ID][ext] {
		a, ok := t.Accounts[user]
		if !ok || !b.s.boxes[t.ID][a.Extension] {
			return "", sipmwi.ErrNoMailbox
		}
		ext = a.Extension
	}
	return key(t.ID, ext), nil
}

// Summary reads the mailbox's counts through the voicemail store.
func (b mailboxes) Summary(mailbox string) (int, int) {
	i := strings.LastIndexByte(mailbox, '/')
	if i < 0 {
		return 0, 0
	}
	return (*b.s.counts.Load())(mailbox[:i], mailbox[i+1:])
}
