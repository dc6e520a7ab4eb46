package mwi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"pbx/sipcore"
	"pbx/sipcore/registrar"
)

// EventPackage is the only event package the notifier serves (RFC 3842).
const EventPackage = "message-summary"

// ContentType is the NOTIFY body's type (RFC 3842 section 5).
const ContentType = "application/simple-message-summary"

// Defaults of Options.
const (
	DefaultExpires    = time.Hour
	DefaultMinExpires = time.Minute
	DefaultMaxExpires = 24 * time.Hour
	// DefaultMaxPerSubscriber bounds the subscriptions of one account.
	DefaultMaxPerSubscriber = 32
	// notifyTimeout bounds one NOTIFY transaction (64*T1, Timer F).
	notifyTimeout = 32 * time.Second
	// resyncWorkers bounds the NOTIFYs in flight when Run resyncs the
	// subscriptions restored at start; a phone gone for good holds one for
	// notifyTimeout, so there are enough for live phones to pass.
	resyncWorkers = 64
)

var (
	// ErrNoMailbox is returned by Mailboxes.Resolve for a user without a
	// mailbox; the SUBSCRIBE is answered 404.
	ErrNoMailbox = errors.New("no such mailbox")
	// ErrForbidden is returned by Mailboxes.Resolve for a mailbox the
	// subscriber may not watch (another tenant's); the SUBSCRIBE is
	// answered 403.
	ErrForbidden = errors.New("mailbox not allowed to this subscriber")
	// ErrInvalidOptions is wrapped by New for options that cannot work.
	ErrInvalidOptions = errors.New("invalid mwi options")
)

// Mailboxes is what the notifier needs to know of voicemail. It must be safe
// for concurrent use and quick (Resolve runs on the SIP handler path).
type Mailboxes interface {
	// Resolve maps the Request-URI user of a SUBSCRIBE in domain (the
	// Request-URI's host when it is a served domain, else the realm the
	// subscriber authenticated in) to a mailbox key, or returns
	// ErrNoMailbox or ErrForbidden (a mailbox of another tenant).
	Resolve(user, domain string, subscriber registrar.Account) (mailbox string, err error)
	// Summary returns the mailbox's new and old (saved) message counts.
	Summary(mailbox string) (newMessages, oldMessages int)
}

// Options configures a Manager.
type Options struct {
	SIP       *sipcore.Server // required: sends the NOTIFYs
	Auth      *registrar.Auth // required: the registrar's digest verifier
	Mailboxes Mailboxes       // required
	Store     Store           // may be nil: subscriptions live in memory only

	DefaultExpires time.Duration // when the SUBSCRIBE names none; default 1h
	MinExpires     time.Duration // below: 423 Interval Too Brief; default 60s
	MaxExpires     time.Duration // above: clamped; default 24h

	// MaxPerSubscriber bounds the subscriptions of one account; a new one
	// past it replaces the one expiring soonest (a rebooted phone
	// subscribes again without ending its old dialogs). Default
	// DefaultMaxPerSubscriber.
	MaxPerSubscriber int

	// OnAuthFailure and OnAuthSuccess are the guard's hooks, as for
	// REGISTER (registrar.AuthHooks).
	OnAuthFailure func(src netip.AddrPort, domain, username string)
	OnAuthSuccess func(src netip.AddrPort, domain, username string) bool
}

// Manager keeps the subscriptions and sends their NOTIFYs.
type Manager struct {
	log  *slog.Logger
	opts Options

	mu        sync.Mutex
	subs      map[string]*sub            // by Subscription.Key
	byMailbox map[string]map[string]*sub // mailbox -> key -> sub
	// perSubscriber counts the subscriptions of each account.
	perSubscriber map[string]int
	restored      []*sub // to resync once the listeners serve
	closed        bool

	storeMu sync.Mutex // orders writes to the Store
}

// sub is one live subscription.
type sub struct {
	sendMu sync.Mutex // one NOTIFY at a time, in CSeq order

	mu    sync.Mutex // guards the fields below
	s     Subscription
	timer *time.Timer
	ended bool // removed: only its final NOTIFY may still go
}

// New builds a Manager and restores the subscriptions the Store holds
// (expired ones are dropped from it).
func New(opts Options, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.SIP == nil || opts.Auth == nil || opts.Mailboxes == nil {
		return nil, fmt.Errorf("%w: SIP, Auth and Mailboxes are required", ErrInvalidOptions)
	}
	if opts.MinExpires <= 0 {
		opts.MinExpires = DefaultMinExpires
	}
	if opts.MaxExpires <= 0 {
		opts.MaxExpires = DefaultMaxExpires
	}
	if opts.DefaultExpires <= 0 {
		opts.DefaultExpires = DefaultExpires
	}
	if opts.MaxExpires < opts.MinExpires {
		return nil, fmt.Errorf("%w: MaxExpires %s below MinExpires %s", ErrInvalidOptions, opts.MaxExpires, opts.MinExpires)
	}
	opts.DefaultExpires = min(max(opts.DefaultExpires, opts.MinExpires), opts.MaxExpires)
	if opts.MaxPerSubscriber <= 0 {
		opts.MaxPerSubscriber = DefaultMaxPerSubscriber
	}
	m := &Manager{log: log, opts: opts, subs: map[string]*sub{}, byMailbox: map[string]map[string]*sub{}, perSubscriber: map[string]int{}}
	if opts.Store == nil {
		return m, nil
	}
	all, err := opts.Store.LoadSubscriptions()
	if err != nil {
		return nil, fmt.Errorf("load subscriptions: %w", err)
	}
	now := time.Now()
	var stale []string
	for _, s := range all {
		if !now.Before(s.Expires) {
			stale = append(stale, s.Key())
			continue
		}
		sb := &sub{s: s}
		if old := m.add(sb); old != nil && m.remove(old) {
			stale = append(stale, old.s.Key())
		}
		m.restored = append(m.restored, sb)
	}
	if len(stale) > 0 {
		if err := opts.Store.SaveSubscriptions(nil, stale); err != nil {
			return nil, fmt.Errorf("drop expired subscriptions: %w", err)
		}
	}
	log.Info("mwi subscriptions restored", "count", len(m.restored), "expired", len(stale))
	return m, nil
}

// add indexes sb and arms its expiry timer. It returns the subscription
// sb displaces when its subscriber already has MaxPerSubscriber, if any
// (unindexed but not yet marked ended: the caller passes it to remove).
func (m *Manager) add(sb *sub) (displaced *sub) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.perSubscriber[sb.s.Subscriber] >= m.opts.MaxPerSubscriber {
		displaced = m.soonestLocked(sb.s.Subscriber)
	}
	m.perSubscriber[sb.s.Subscriber]++
	k := sb.s.Key()
	m.subs[k] = sb
	set := m.byMailbox[sb.s.Mailbox]
	if set == nil {
		set = map[string]*sub{}
		m.byMailbox[sb.s.Mailbox] = set
	}
	set[k] = sb
	sb.mu.Lock()
	sb.timer = time.AfterFunc(time.Until(sb.s.Expires), func() { m.expire(sb) })
	sb.mu.Unlock()
	return displaced
}

// soonestLocked returns the subscription of subscriber that expires first.
func (m *Manager) soonestLocked(subscriber string) *sub {
	var found *sub
	var at time.Time
	for _, sb := range m.subs {
		sb.mu.Lock()
		s, exp := sb.s.Subscriber, sb.s.Expires
		sb.mu.Unlock()
		if s == subscriber && (found == nil || exp.Before(at)) {
			found, at = sb, exp
		}
	}
	return found
}

// remove unindexes sb and marks it ended; false when it was gone already
// (whoever removes it sends the final NOTIFY, if any).
func (m *Manager) remove(sb *sub) bool {
	sb.mu.Lock()
	if sb.ended {
		sb.mu.Unlock()
		return false
	}
	sb.ended = true
	if sb.timer != nil {
		sb.timer.Stop()
	}
	k, mailbox, subscriber := sb.s.Key(), sb.s.Mailbox, sb.s.Subscriber
	sb.mu.Unlock()
	m.mu.Lock()
	if m.subs[k] == sb {
		delete(m.subs, k)
		if m.perSubscriber[subscriber]--; m.perSubscriber[subscriber] <= 0 {
			delete(m.perSubscriber, subscriber)
		}
		if set := m.byMailbox[mailbox]; set != nil {
			delete(set, k)
			if len(set) == 0 {
				delete(m.byMailbox, mailbox)
			}
		}
	}
	m.mu.Unlock()
	return true
}

// lookup returns the live subscription of a dialog.
func (m *Manager) lookup(key string) *sub {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.subs[key]
}

// expire ends sb with a final NOTIFY when its expiry has come (a refresh
// may have moved it since the timer was armed).
func (m *Manager) expire(sb *sub) {
	sb.mu.Lock()
	left := time.Until(sb.s.Expires)
	if left > 0 && !sb.ended {
		sb.timer.Reset(left)
	}
	sb.mu.Unlock()
	if left > 0 {
		return
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed || !m.remove(sb) {
		return
	}
	m.save(nil, sb)
	m.send(sb, true)
}

// Notify sends every subscription of mailbox a NOTIFY with its current
// counts, in the background, and returns how many there are. The voicemail
// store calls it on every change of the mailbox.
func (m *Manager) Notify(mailbox string) int {
	m.mu.Lock()
	subs := make([]*sub, 0, len(m.byMailbox[mailbox]))
	for _, sb := range m.byMailbox[mailbox] {
		subs = append(subs, sb)
	}
	m.mu.Unlock()
	for _, sb := range subs {
		go m.send(sb, false)
	}
	return len(subs)
}

// Count returns the number of live subscriptions.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subs)
}

// Subscriptions returns a copy of every live subscription.
func (m *Manager) Subscriptions() []Subscription {
	m.mu.Lock()
	subs := make([]*sub, 0, len(m.subs))
	for _, sb := range m.subs {
		subs = append(subs, sb)
	}
	m.mu.Unlock()
	out := make([]Subscription, 0, len(subs))
	for _, sb := range subs {
		sb.mu.Lock()
		out = append(out, sb.s)
		sb.mu.Unlock()
	}
	return out
}

// save writes put (when not nil) or removes gone (when not nil) in the Store.
func (m *Manager) save(put *sub, gone *sub) {
	if m.opts.Store == nil {
		return
	}
	var puts []Subscription
	var removes []string
	if put != nil {
		put.mu.Lock()
		if !put.ended {
			puts = append(puts, put.s)
		}
		put.mu.Unlock()
	}
	if gone != nil {
		gone.mu.Lock()
		removes = append(removes, gone.s.Key())
		gone.mu.Unlock()
	}
	if len(puts) == 0 && len(removes) == 0 {
		return
	}
	m.storeMu.Lock()
	defer m.storeMu.Unlock()
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return // shut down: the Store may be closed; what it holds resyncs
	}
	if err := m.opts.Store.SaveSubscriptions(puts, removes); err != nil {
		m.log.Error("mwi subscription not saved", "err", err)
	}
}

// Run resyncs the subscriptions restored at New with a NOTIFY each once the
// SIP listeners serve, then waits for ctx to end and stops the expiry
// timers (the subscriptions stay in the Store for the next start).
func (m *Manager) Run(ctx context.Context) error {
	select {
	case <-m.opts.SIP.Ready():
		m.resync(ctx)
	case <-ctx.Done():
	}
	<-ctx.Done()
	m.mu.Lock()
	m.closed = true
	for _, sb := range m.subs {
		sb.mu.Lock()
		sb.timer.Stop()
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	return nil
}

// resync sends every restored subscription a NOTIFY, a few at a time.
func (m *Manager) resync(ctx context.Context) {
	m.mu.Lock()
	restored := m.restored
	m.restored = nil
	m.mu.Unlock()
	sem := make(chan struct{}, resyncWorkers)
	var wg sync.WaitGroup
	for _, sb := range restored {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.send(sb, false)
		}()
	}
	wg.Wait()
}
