package registrar

import (
	"bytes"
	"fmt"
	"net/netip"
	"pbx/sipcore"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"
)

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

// register authenticates a REGISTER for the AOR of its To and applies its
// contacts, returning the response.
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
