package registrar

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"pbx/sipcore"
)

// Defaults of Options.
const (
	DefaultMinExpires     = 60 * time.Second
	DefaultMaxExpires     = 3600 * time.Second
	DefaultExpires        = 3600 * time.Second
	DefaultMaxContacts    = 5
	DefaultFlushInterval  = time.Second
	DefaultSweepInterval  = 10 * time.Second
	maxContactsPerRequest = 32
)

// Store persists bindings. SaveBindings receives the bindings that changed
// and the keys (Binding.Key) of those removed since the last call; it runs on
// the registrar's write-behind loop, never on the REGISTER path.
type Store interface {
	LoadBindings() ([]Binding, error)
	SaveBindings(put []Binding, remove []string) error
}

// Options configures a Registrar.
type Options struct {
	Auth *Auth // required

	MinExpires     time.Duration // below: 423 Interval Too Brief; default 60s
	MaxExpires     time.Duration // above: clamped; default 3600s
	DefaultExpires time.Duration // when the request names none; default 3600s

	DefaultMaxContacts int  // for accounts with MaxContacts 0; default 5
	RejectWhenFull     bool // 403 instead of replacing the binding expiring soonest

	Store         Store         // may be nil: bindings live in memory only
	FlushInterval time.Duration // write-behind period; default 1s
	SweepInterval time.Duration // expired-binding sweep period; default 10s

	// SIP sends keepalives to phones behind NAT; nil sends none.
	SIP *sipcore.Server
	// KeepaliveInterval between keepalives; 0: DefaultKeepaliveInterval,
	// negative: none.
	KeepaliveInterval time.Duration
	// NATExpires caps the expiry granted over UDP to a phone behind NAT;
	// 0: DefaultNATExpires (never below MinExpires), negative: no cap.
	NATExpires time.Duration

	// OnAuthFailure, when set, is called for every request whose credentials
	// were presented and wrong (the guard counts these). It must be quick.
	OnAuthFailure func(src netip.AddrPort, domain, username string)
	// OnAuthSuccess, when set, is called for every request whose credentials
	// are valid, before it is acted on; false refuses it with 403 Forbidden,
	// the answer to wrong credentials (the guard refuses an account locked
	// against password guessing). It must be quick.
	OnAuthSuccess func(src netip.AddrPort, domain, username string) bool
	// OnChange, when set, is told of every binding added, refreshed,
	// removed or expired, outside the registrar's locks. It must be quick.
	OnChange func(Change, Binding)

	Now func() time.Time
}

// Registrar handles REGISTER and answers location queries.
type Registrar struct {
	log  *slog.Logger
	opts Options
	auth *Auth
	now  func() time.Time

	mu    sync.RWMutex
	aors  map[aorKey]*aor
	byExt map[extKey]map[aorKey]struct{}

	ka keepaliveCounters

	dirtyMu sync.Mutex
	dirty   map[string]Binding
	removed map[string]struct{}

	flushMu sync.Mutex

	date dateCache
}

type aorKey struct{ tenant, username string }
type extKey struct{ tenant, extension string }

type aor struct {
	extension string
	bindings  []Binding
}

// New builds a Registrar and restores the bindings the Store holds (expired
// ones are dropped and removed from the store).
func New(opts Options, log *slog.Logger) (*Registrar, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Auth == nil {
		return nil, fmt.Errorf("%w: Auth is required", ErrInvalidOptions)
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
	if opts.DefaultMaxContacts <= 0 {
		opts.DefaultMaxContacts = DefaultMaxContacts
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.KeepaliveInterval == 0 {
		opts.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if opts.NATExpires == 0 {
		opts.NATExpires = DefaultNATExpires
	}
	if opts.NATExpires > 0 {
		opts.NATExpires = max(opts.NATExpires, opts.MinExpires)
	}
	r := &Registrar{
		log: log, opts: opts, auth: opts.Auth, now: opts.Now,
		aors:    map[aorKey]*aor{},
		byExt:   map[extKey]map[aorKey]struct{}{},
		dirty:   map[string]Binding{},
		removed: map[string]struct{}{},
	}
	if r.now == nil {
		r.now = time.Now
	}
	if opts.Store != nil {
		if err := r.restore(opts.Store); err != nil {
			return nil, err
		}
	}
	if opts.SIP != nil {
		opts.SIP.OnLoadOver(r.Compact)
	}
	return r, nil
}

// Auth returns the digest verifier (shared with INVITE handling).
func (r *Registrar) Auth() *Auth { return r.auth }

// putLocked inserts or replaces b (matched by Key).
func (r *Registrar) putLocked(b Binding) {
	k := aorKey{b.Tenant, b.Username}
	a := r.aors[k]
	if a == nil {
		a = &aor{extension: b.Extension}
		r.aors[k] = a
	}
	if a.extension != b.Extension {
		r.unindexLocked(k, a.extension)
		a.extension = b.Extension
	}
	r.indexLocked(k, b.Extension)
	for i := range a.bindings {
		if a.bindings[i].Contact == b.Contact {
			a.bindings[i] = b
			return
		}
	}
	a.bindings = append(a.bindings, b)
}

func (r *Registrar) indexLocked(k aorKey, ext string) {
	if ext == "" {
		return
	}
	ek := extKey{k.tenant, ext}
	set := r.byExt[ek]
	if set == nil {
		set = map[aorKey]struct{}{}
		r.byExt[ek] = set
	}
	set[k] = struct{}{}
}

func (r *Registrar) unindexLocked(k aorKey, ext string) {
	ek := extKey{k.tenant, ext}
	if set := r.byExt[ek]; set != nil {
		delete(set, k)
		if len(set) == 0 {
			delete(r.byExt, ek)
		}
	}
}

// storeLocked stores an AOR's new bindings next (a is the AOR, nil when it
// had none), keeping the extension index, with r.mu held. A live AOR is
// always indexed under its extension: only a new one, or one whose
// extension changed, needs indexing (a refresh does not).
func (r *Registrar) storeLocked(key aorKey, a *aor, ext string, next []Binding) {
	index := false
	if a == nil {
		if len(next) == 0 {
			return
		}
		a = &aor{extension: ext}
		r.aors[key] = a
		index = true
	}
	if a.extension != ext {
		r.unindexLocked(key, a.extension)
		a.extension = ext
		index = true
	}
	a.bindings = next
	if len(next) == 0 {
		r.unindexLocked(key, a.extension)
		delete(r.aors, key)
	} else if index {
		r.indexLocked(key, a.extension)
	}
}

// Lookup returns the live bindings of every account with extension in
// tenant, most recently updated first.
func (r *Registrar) Lookup(tenant, extension string) []Binding {
	now := r.now()
	r.mu.RLock()
	var out []Binding
	for k := range r.byExt[extKey{tenant, extension}] {
		for _, b := range r.aors[k].bindings {
			if !b.Expired(now) {
				out = append(out, b)
			}
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Binding) int { return b.Updated.Compare(a.Updated) })
	return out
}

// LookupAccount returns the live bindings of one account.
func (r *Registrar) LookupAccount(tenant, username string) []Binding {
	now := r.now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	a := r.aors[aorKey{tenant, username}]
	if a == nil {
		return nil
	}
	out := make([]Binding, 0, len(a.bindings))
	for _, b := range a.bindings {
		if !b.Expired(now) {
			out = append(out, b)
		}
	}
	return out
}

// List returns every live binding, ordered by tenant, extension, username
// and contact.
func (r *Registrar) List() []Binding {
	out := r.live(nil)
	slices.SortFunc(out, compareBindings)
	return out
}

// live returns the live bindings of every account that keep accepts (nil:
// all of them), copied under the read lock, in no order.
func (r *Registrar) live(keep func(*Binding) bool) []Binding {
	now := r.now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Binding
	for _, a := range r.aors {
		for i := range a.bindings {
			if b := &a.bindings[i]; !b.Expired(now) && (keep == nil || keep(b)) {
				out = append(out, *b)
			}
		}
	}
	return out
}

// compareBindings orders bindings by tenant, extension, username and
// contact, field by field (no concatenated keys: List sorts every binding).
func compareBindings(a, b Binding) int {
	return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Extension, b.Extension),
		strings.Compare(a.Username, b.Username), strings.Compare(a.Contact, b.Contact))
}

// CountByTenant returns the number of live bindings of each tenant, without
// copying them (the headline counters ask every few seconds).
func (r *Registrar) CountByTenant() map[string]int {
	now := r.now()
	out := map[string]int{}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, a := range r.aors {
		for _, b := range a.bindings {
			if !b.Expired(now) {
				out[b.Tenant]++
			}
		}
	}
	return out
}

// Count returns the number of live bindings.
func (r *Registrar) Count() int {
	now := r.now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, a := range r.aors {
		for _, b := range a.bindings {
			if !b.Expired(now) {
				n++
			}
		}
	}
	return n
}

// Drop removes every binding of the accounts with extension in tenant (the
// operator's "drop a registration"). It returns how many were removed.
func (r *Registrar) Drop(tenant, extension string) int {
	r.mu.Lock()
	var removed []Binding
	ek := extKey{tenant, extension}
	for k := range r.byExt[ek] {
		if a := r.aors[k]; a != nil {
			removed = append(removed, a.bindings...)
			delete(r.aors, k)
		}
	}
	delete(r.byExt, ek)
	r.mu.Unlock()
	r.markDirty(nil, removed)
	r.notify(nil, nil, removed, r.now())
	return len(removed)
}

// sweep removes expired bindings from memory and queues their deletion.
func (r *Registrar) sweep() {
	now := r.now()
	var removed []Binding
	r.mu.Lock()
	for k, a := range r.aors {
		if !slices.ContainsFunc(a.bindings, func(b Binding) bool { return b.Expired(now) }) {
			continue
		}
		// A new array: REGISTER reads a stored one after unlocking.
		var kept []Binding
		for _, b := range a.bindings {
			if b.Expired(now) {
				removed = append(removed, b)
			} else {
				kept = append(kept, b)
			}
		}
		a.bindings = kept
		if len(kept) == 0 {
			r.unindexLocked(k, a.extension)
			delete(r.aors, k)
		}
	}
	r.mu.Unlock()
	r.markDirty(nil, removed)
	r.notify(nil, nil, removed, now)
}

// Run sweeps expired bindings, flushes changes to the Store and, with a SIP
// server, keeps phones behind NAT reachable, until ctx ends; then it flushes
// once more.
func (r *Registrar) Run(ctx context.Context) error {
	if r.opts.SIP != nil && r.opts.KeepaliveInterval > 0 {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.keepaliveLoop(ctx) }()
		defer func() { cancel(); <-done }()
	}
	flush := time.NewTicker(r.opts.FlushInterval)
	defer flush.Stop()
	sweep := time.NewTicker(r.opts.SweepInterval)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := r.Flush(); err != nil {
				r.log.Error("registrations not saved at shutdown", "err", err)
				return err
			}
			return nil
		case <-flush.C:
			if err := r.Flush(); err != nil {
				r.log.Error("registrations not saved", "err", err)
			}
		case <-sweep.C:
			r.sweep()
		}
	}
}
