package registrar

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

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
		bs, err := opts.Store.LoadBindings()
		if err != nil {
			return nil, fmt.Errorf("load registrations: %w", err)
		}
		now := r.now()
		var stale []string
		r.mu.Lock()
		for _, b := range bs {
			if b.Expired(now) {
				stale = append(stale, b.Key())
				continue
			}
			r.putLocked(b)
		}
		r.mu.Unlock()
		if len(stale) > 0 {
			if err := opts.Store.SaveBindings(nil, stale); err != nil {
				return nil, fmt.Errorf("drop expired registrations: %w", err)
			}
		}
		log.Info("registrations restored", "count", len(bs)-len(stale), "expired", len(stale))
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

func (r *Registrar) markDirty(put []Binding, removed []Binding) {
	if r.opts.Store == nil || (len(put) == 0 && len(removed) == 0) {
		return
	}
	r.dirtyMu.Lock()
	for i := range put {
		k := put[i].Key()
		r.dirty[k] = put[i]
		delete(r.removed, k)
	}
	for i := range removed {
		k := removed[i].Key()
		delete(r.dirty, k)
		r.removed[k] = struct{}{}
	}
	r.dirtyMu.Unlock()
}

// HandleRegister answers a REGISTER request.
func (r *Registrar) HandleRegister(req *sip.Request, tx sip.ServerTransaction) {
	res := r.register(req)
	if err := tx.Respond(res); err != nil {
		r.log.Debug("respond to REGISTER", "err", err, "status", res.StatusCode)
	}
}

// RealmFor returns the realm (tenant SIP domain) for a request: the first
// served domain among the given hosts, else the first host, lower-cased.
func RealmFor(dir Directory, hosts ...string) string {
	for _, h := range hosts {
		h = strings.ToLower(h)
		if h != "" && dir.ServesDomain(h) {
			return h
		}
	}
	for _, h := range hosts {
		if h != "" {
			return strings.ToLower(h)
		}
	}
	return ""
}

func (r *Registrar) register(req *sip.Request) *sip.Response {
	to := req.To()
	if to == nil || req.CallID() == nil || req.CSeq() == nil {
		return sipcore.NewResponse(req, sip.StatusBadRequest, "Bad Request")
	}
	// Copies of what a binding or a hook may keep: the request's strings
	// can be slices of the whole message (sipcore's REGISTER parser).
	realm := strings.Clone(RealmFor(r.auth.Directory(), to.Address.Host, req.Recipient.Host))
	acct, refused := r.auth.Authenticate(req, false, realm, AuthHooks{OnFailure: r.opts.OnAuthFailure, OnSuccess: r.opts.OnAuthSuccess})
	if refused != nil {
		return refused
	}
	if u := to.Address.User; u != acct.Username && (acct.Extension == "" || u != acct.Extension) {
		// Valid credentials for another AOR.
		return sipcore.NewResponse(req, sip.StatusForbidden, "Forbidden")
	}
	return r.apply(req, acct, realm)
}

type change struct {
	raw      string
	instance string
	q        string
	expires  time.Duration
}

func (r *Registrar) apply(req *sip.Request, acct Account, domain string) *sip.Response {
	now := r.now()
	hdrExpires := time.Duration(-1)
	if h := sipcore.Header(req, "Expires"); h != nil {
		v, err := ParseExpires(h.Value())
		if err != nil {
			return sipcore.NewResponse(req, sip.StatusBadRequest, "Bad Expires")
		}
		hdrExpires = v
	}
	// tmpl holds what every binding this request puts shares.
	tmpl := &Binding{Tenant: acct.Tenant, Username: acct.Username, Extension: acct.Extension, Domain: domain,
		CallID: strings.Clone(string(*req.CallID())), CSeq: req.CSeq().SeqNo, Since: now, Updated: now}
	src, _ := netip.ParseAddrPort(req.Source())
	tmpl.Source = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	tmpl.Transport = strings.ToLower(req.Transport())
	changes, wildcard, bad := r.parseContacts(req, hdrExpires, tmpl)
	if bad != nil {
		return bad
	}
	maxContacts := acct.MaxContacts
	if maxContacts <= 0 {
		maxContacts = r.opts.DefaultMaxContacts
	}
	if req.Laddr.IP != nil {
		if ip, ok := netip.AddrFromSlice(req.Laddr.IP); ok {
			tmpl.Local = netip.AddrPortFrom(ip.Unmap(), uint16(req.Laddr.Port))
		}
	}
	if h := sipcore.Header(req, "User-Agent"); h != nil {
		tmpl.UserAgent = strings.Clone(h.Value())
	}

	key := aorKey{acct.Tenant, acct.Username}
	r.mu.Lock()
	a := r.aors[key]
	var was []Binding
	if a != nil {
		was = a.bindings
	}
	u, status := r.updateLocked(was, changes, wildcard, tmpl, maxContacts, now)
	if status != 0 {
		r.mu.Unlock()
		reason := "Server Internal Error"
		if status == sip.StatusForbidden {
			reason = "Too Many Registered Contacts"
		}
		return sipcore.NewResponse(req, status, reason)
	}
	r.storeLocked(key, a, acct.Extension, u.next)
	r.mu.Unlock()
	r.markDirty(u.put, u.removed)
	r.notify(u.put, u.current, u.removed, now)
	return r.ok(req, u.next, now)
}

// parseContacts reads a REGISTER's Contact headers into the changes they
// ask for (RFC 3261 10.3 steps 6 and 8), or returns the response refusing
// them.
func (r *Registrar) parseContacts(req *sip.Request, hdrExpires time.Duration, tmpl *Binding) (changes []change, wildcard bool, bad *sip.Response) {
	// The Contact headers are visited in place, not gathered in a list.
	isContact := func(h sip.Header) bool { return strings.EqualFold(h.Name(), "Contact") }
	contacts := 0
	for _, h := range req.Headers() {
		if isContact(h) {
			contacts++
		}
	}
	if contacts > maxContactsPerRequest {
		return nil, false, sipcore.NewResponse(req, sip.StatusBadRequest, "Too Many Contacts")
	}
	for _, h := range req.Headers() {
		if !isContact(h) {
			continue
		}
		ch, ok := h.(*sip.ContactHeader)
		if !ok {
			return nil, false, sipcore.NewResponse(req, sip.StatusBadRequest, "Bad Contact")
		}
		if ch.Address.Wildcard {
			wildcard = true
			continue
		}
		exp := hdrExpires
		if v, ok := ch.Params.Get("expires"); ok {
			d, err := ParseExpires(v)
			if err != nil {
				return nil, false, sipcore.NewResponse(req, sip.StatusBadRequest, "Bad Contact Expires")
			}
			exp = d
		}
		if exp < 0 {
			exp = r.opts.DefaultExpires
		}
		if exp > 0 && exp < r.opts.MinExpires {
			res := sipcore.NewResponse(req, sip.StatusIntervalToBrief, "Interval Too Brief")
			res.AppendHeader(sip.NewHeader("Min-Expires", strconv.Itoa(int(r.opts.MinExpires/time.Second))))
			return nil, false, res
		}
		exp = min(exp, r.opts.MaxExpires)
		if exp > 0 {
			exp = r.natExpiry(exp, tmpl.Transport, ch.Address, tmpl.Source)
		}
		c := change{raw: uriText(&ch.Address), expires: exp}
		c.instance, _ = ch.Params.Get("+sip.instance")
		c.q, _ = ch.Params.Get("q")
		c.instance, c.q = strings.Clone(c.instance), strings.Clone(c.q)
		changes = append(changes, c)
	}
	// RFC 3261 10.3 step 6: "*" only alone and with Expires: 0.
	if wildcard && (contacts != 1 || hdrExpires != 0) {
		return nil, false, sipcore.NewResponse(req, sip.StatusBadRequest, "Bad Wildcard Contact")
	}
	return changes, wildcard, nil
}

// uriText is u.String() in one allocation of its size: written into a
// pooled buffer (shared with URIMatches), then copied.
func uriText(u *sip.Uri) string {
	buf := uriBufs.Get().(*bytes.Buffer)
	buf.Reset()
	u.StringWrite(buf)
	s := buf.String()
	if buf.Cap() <= 4096 {
		uriBufs.Put(buf)
	}
	return s
}

// update is what a REGISTER does to an AOR's bindings.
type update struct {
	current []Binding // the live bindings before
	next    []Binding // after
	put     []Binding // added or refreshed
	removed []Binding // expired, unregistered or replaced
}

// updateLocked applies changes to an AOR's bindings was (RFC 3261 10.3
// steps 6 to 8) with r.mu held, or returns the status refusing them. It
// works through indexes and pointers: Bindings are large, and the REGISTER
// goroutine's stack is small (copies would grow it).
//
// current is was itself when none expired: a stored bindings array is
// never written (each change, the sweep's included, stores a new one), so
// a refresh allocates only next, the array that replaces it.
func (r *Registrar) updateLocked(was []Binding, changes []change, wildcard bool, tmpl *Binding, maxContacts int, now time.Time) (u update, status int) {
	u.current = was
	if slices.ContainsFunc(was, func(b Binding) bool { return b.Expired(now) }) {
		u.current = nil
		for i := range was {
			if was[i].Expired(now) {
				u.removed = append(u.removed, was[i])
			} else {
				u.current = append(u.current, was[i])
			}
		}
	}
	// Exactly as long as current: a refresh (the usual REGISTER) adds no
	// binding, and next is what the AOR keeps.
	next := slices.Clone(u.current)
	if wildcard {
		u.removed = append(u.removed, next...)
		next = nil
	}
	for ci := range changes {
		c := &changes[ci]
		idx := slices.IndexFunc(next, func(b Binding) bool {
			return b.Contact == c.raw || (c.instance != "" && b.InstanceID == c.instance)
		})
		if idx >= 0 && next[idx].CallID == tmpl.CallID && tmpl.CSeq <= next[idx].CSeq {
			// RFC 3261 10.3 step 7: out of order request.
			return update{}, sip.StatusInternalServerError
		}
		if c.expires == 0 {
			if idx >= 0 {
				u.removed = append(u.removed, next[idx])
				next = slices.Delete(next, idx, idx+1)
			}
			continue
		}
		since := now
		switch {
		case idx >= 0 && next[idx].Contact == c.raw:
			since = next[idx].Since
		case idx >= 0:
			u.removed = append(u.removed, next[idx])
		case len(next) >= maxContacts:
			if r.opts.RejectWhenFull {
				return update{}, sip.StatusForbidden
			}
			// Replace the binding that expires soonest.
			victim := 0
			for i := range next {
				if next[i].Expires.Before(next[victim].Expires) {
					victim = i
				}
			}
			u.removed = append(u.removed, next[victim])
			next = slices.Delete(next, victim, victim+1)
		}
		if idx < 0 {
			next = append(next, Binding{})
			idx = len(next) - 1
		}
		b := &next[idx]
		*b = *tmpl
		b.Contact, b.InstanceID, b.Q = c.raw, c.instance, c.q
		b.Since, b.Expires = since, now.Add(c.expires)
		u.put = append(u.put, *b)
	}
	// Drop put entries that were removed again later in the same request.
	u.put = slices.DeleteFunc(u.put, func(b Binding) bool {
		return !slices.ContainsFunc(next, func(n Binding) bool { return n.Contact == b.Contact && n.Updated.Equal(b.Updated) })
	})
	u.next = next
	return u, 0
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

// ok is the 200 to a REGISTER: every binding of the AOR with its
// remaining seconds, and the Date.
func (r *Registrar) ok(req *sip.Request, bindings []Binding, now time.Time) *sip.Response {
	res := sipcore.NewResponse(req, sip.StatusOK, "OK")
	for i := range bindings {
		secs := int(bindings[i].Expires.Sub(now).Round(time.Second) / time.Second)
		res.AppendHeader(sip.NewHeader("Contact", contactValue(&bindings[i], max(secs, 0))))
	}
	res.AppendHeader(sip.NewHeader("Date", r.date.format(now)))
	return res
}

// contactValue is the Contact header value a 200 lists for b: the contact
// URI in angle brackets with its expires and +sip.instance parameters,
// written as sipgo writes a ContactHeader (a parameter value holding a space
// or tab quoted). It is kept as text, not a parsed header: the 200 stays in
// memory with its transaction while it lingers to answer retransmissions,
// and a parsed URI with its parameters costs several times its text.
// b.Contact is itself the text of a parsed URI (Binding.Contact).
func contactValue(b *Binding, expires int) string {
	var sb strings.Builder
	sb.Grow(len(b.Contact) + len(b.InstanceID) + 40)
	sb.WriteByte('<')
	sb.WriteString(b.Contact)
	sb.WriteString(">;expires=")
	sb.WriteString(strconv.Itoa(expires))
	if b.InstanceID != "" {
		sb.WriteString(";+sip.instance=")
		if strings.ContainsAny(b.InstanceID, " \t") {
			sb.WriteByte('"')
			sb.WriteString(b.InstanceID)
			sb.WriteByte('"')
		} else {
			sb.WriteString(b.InstanceID)
		}
	}
	return sb.String()
}

// ParseExpires parses an Expires header or contact parameter value
// (delta-seconds). Values beyond 2^32-1 are clamped as RFC 3261 allows.
func ParseExpires(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 20 {
		return 0, fmt.Errorf("%w: %q", ErrBadExpires, v)
	}
	var n uint64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", ErrBadExpires, v)
		}
		if n < 1<<32 {
			n = n*10 + uint64(c-'0')
		}
	}
	n = min(n, 1<<32-1)
	return time.Duration(n) * time.Second, nil
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
	now := r.now()
	r.mu.RLock()
	var out []Binding
	for _, a := range r.aors {
		for _, b := range a.bindings {
			if !b.Expired(now) {
				out = append(out, b)
			}
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, compareBindings)
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

// Flush writes pending changes to the Store now.
func (r *Registrar) Flush() error {
	if r.opts.Store == nil {
		return nil
	}
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.dirtyMu.Lock()
	if len(r.dirty) == 0 && len(r.removed) == 0 {
		r.dirtyMu.Unlock()
		return nil
	}
	put := make([]Binding, 0, len(r.dirty))
	for _, b := range r.dirty {
		put = append(put, b)
	}
	remove := make([]string, 0, len(r.removed))
	for k := range r.removed {
		remove = append(remove, k)
	}
	r.dirty = map[string]Binding{}
	r.removed = map[string]struct{}{}
	r.dirtyMu.Unlock()
	if err := r.opts.Store.SaveBindings(put, remove); err != nil {
		// Put the batch back unless newer changes superseded it.
		r.dirtyMu.Lock()
		for _, b := range put {
			k := b.Key()
			if _, ok := r.dirty[k]; !ok {
				if _, gone := r.removed[k]; !gone {
					r.dirty[k] = b
				}
			}
		}
		for _, k := range remove {
			if _, ok := r.dirty[k]; !ok {
				r.removed[k] = struct{}{}
			}
		}
		r.dirtyMu.Unlock()
		return fmt.Errorf("save registrations: %w", err)
	}
	return nil
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

// Close flushes pending changes.
func (r *Registrar) Close() error { return r.Flush() }
