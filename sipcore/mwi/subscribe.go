package mwi

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
	"pbx/sipcore/registrar"
)

// HandleSubscribe answers a SUBSCRIBE (register it with
// sipcore.Server.Handle). The NOTIFY that follows a success is sent after
// the answer, in the background.
func (m *Manager) HandleSubscribe(req *sip.Request, tx sip.ServerTransaction) {
	res, after := m.subscribe(req)
	if err := tx.Respond(res); err != nil {
		m.log.Debug("respond to SUBSCRIBE", "err", err, "status", res.StatusCode)
	}
	if after != nil {
		go after()
	}
}

// eventType is the event package of req's Event header, without parameters.
func eventType(req *sip.Request) string {
	h := req.GetHeader("Event")
	if h == nil {
		return ""
	}
	v, _, _ := strings.Cut(h.Value(), ";")
	return strings.TrimSpace(v)
}

func (m *Manager) subscribe(req *sip.Request) (*sip.Response, func()) {
	if !strings.EqualFold(eventType(req), EventPackage) {
		// RFC 6665 section 4.2.1.1: 489 names the packages served.
		res := sipcore.Response(req, sipcore.StatusBadEvent)
		res.AppendHeader(sip.NewHeader("Allow-Events", EventPackage))
		res.AppendHeader(sip.NewHeader("Allow", m.opts.SIP.Allow()))
		return res, nil
	}
	if !accepts(req) {
		// RFC 6665 section 4.2.1.1: the only body type offered is refused.
		res := sipcore.Response(req, sip.StatusNotAcceptable)
		res.AppendHeader(sip.NewHeader("Accept", ContentType))
		return res, nil
	}
	from, to := req.From(), req.To()
	if from == nil || to == nil || req.CallID() == nil || req.CSeq() == nil {
		return sipcore.Response(req, sip.StatusBadRequest), nil
	}
	if _, ok := to.Params.Get("tag"); ok {
		return m.refresh(req)
	}
	if _, ok := from.Params.Get("tag"); !ok {
		return sipcore.Response(req, sip.StatusBadRequest), nil
	}
	realm := registrar.RealmFor(m.opts.Auth.Directory(), from.Address.Host, req.Recipient.Host)
	acct, refused := m.opts.Auth.Authenticate(req, false, realm,
		registrar.AuthHooks{OnFailure: m.opts.OnAuthFailure, OnSuccess: m.opts.OnAuthSuccess})
	if refused != nil {
		return refused, nil
	}
	expires, res := m.expires(req)
	if res != nil {
		return res, nil
	}
	contact := req.Contact()
	if contact == nil {
		return sip.NewResponseFromRequest(req, sip.StatusBadRequest, "Missing Contact", nil), nil
	}
	// The mailbox's domain is the Request-URI's when it is served (another
	// tenant's is refused by Resolve), else the subscriber's realm (a phone
	// that addresses the PBX by IP address).
	user, domain := req.Recipient.User, realm
	if h := strings.ToLower(req.Recipient.Host); m.opts.Auth.Directory().ServesDomain(h) {
		domain = h
	}
	mailbox, err := m.opts.Mailboxes.Resolve(user, domain, acct)
	switch {
	case errors.Is(err, ErrForbidden):
		return sipcore.Response(req, sip.StatusForbidden), nil
	case err != nil:
		return sipcore.Response(req, sip.StatusNotFound), nil
	}
	transport := strings.ToLower(req.Transport())
	src, _ := netip.ParseAddrPort(req.Source())
	s := Subscription{
		Mailbox: mailbox, Account: (&sip.Uri{Scheme: "sip", User: user, Host: domain}).String(),
		Subscriber: acct.Username + "@" + realm,
		CallID:     req.CallID().Value(), LocalTag: sip.GenerateTagN(16), RemoteTag: tagOf(from.Params),
		LocalURI: to.Address.String(), RemoteURI: from.Address.String(), RemoteTarget: contact.Address.String(),
		RouteSet: recordRoute(req), RemoteCSeq: req.CSeq().SeqNo,
		Source: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Transport: transport, Local: localOf(req),
		Expires: time.Now().Add(expires),
	}
	sb := &sub{s: s}
	res = m.accepted(req, s, expires)
	if expires == 0 {
		// A fetch (RFC 6665 section 4.4.3): one NOTIFY, no subscription.
		sb.ended = true
		return res, func() { m.send(sb, true) }
	}
	if old := m.add(sb); old != nil && m.remove(old) {
		m.save(nil, old)
		m.log.Info("mwi subscription replaced: too many for the account", "subscriber", s.Subscriber, "max", m.opts.MaxPerSubscriber)
	}
	m.log.Debug("mwi subscription", "subscriber", s.Subscriber, "account", s.Account, "expires", expires)
	return res, func() { m.send(sb, false) }
}

// refresh answers a SUBSCRIBE inside a subscription's dialog: a refresh,
// or with Expires: 0 the end of the subscription.
func (m *Manager) refresh(req *sip.Request) (*sip.Response, func()) {
	toTag, _ := req.To().Params.Get("tag")
	key := req.CallID().Value() + "\x00" + toTag + "\x00" + tagOf(req.From().Params)
	sb := m.lookup(key)
	if sb == nil {
		return sipcore.Response(req, sip.StatusCallTransactionDoesNotExists), nil
	}
	expires, res := m.expires(req)
	if res != nil {
		return res, nil
	}
	sb.mu.Lock()
	if sb.ended {
		sb.mu.Unlock()
		return sipcore.Response(req, sip.StatusCallTransactionDoesNotExists), nil
	}
	if cseq := req.CSeq().SeqNo; cseq <= sb.s.RemoteCSeq {
		// RFC 3261 section 12.2.2: a lower CSeq is out of order.
		sb.mu.Unlock()
		return sipcore.Response(req, sip.StatusInternalServerError), nil
	} else {
		sb.s.RemoteCSeq = cseq
	}
	if ct := req.Contact(); ct != nil {
		sb.s.RemoteTarget = ct.Address.String()
	}
	if src, err := netip.ParseAddrPort(req.Source()); err == nil {
		sb.s.Source = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	}
	sb.s.Expires = time.Now().Add(expires)
	s := sb.s
	if expires > 0 {
		sb.timer.Reset(expires)
	}
	sb.mu.Unlock()
	res = m.accepted(req, s, expires)
	if expires == 0 {
		if !m.remove(sb) {
			return sipcore.Response(req, sip.StatusCallTransactionDoesNotExists), nil
		}
		return res, func() {
			m.save(nil, sb)
			m.send(sb, true)
		}
	}
	return res, func() { m.send(sb, false) }
}

// accepted is the 200 to a SUBSCRIBE creating or refreshing s.
func (m *Manager) accepted(req *sip.Request, s Subscription, expires time.Duration) *sip.Response {
	res := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)
	if to := res.To(); to != nil {
		// sipgo tags every response; a new dialog gets ours instead.
		to.Params.Add("tag", s.LocalTag)
	}
	if ep, err := m.opts.SIP.EndpointForLocal(s.Transport, s.Local); err == nil {
		res.AppendHeader(sip.HeaderClone(&ep.Contact))
	}
	res.AppendHeader(sip.NewHeader("Expires", strconv.Itoa(int(expires/time.Second))))
	return res
}

// expires negotiates the subscription's duration, or returns the refusal.
func (m *Manager) expires(req *sip.Request) (time.Duration, *sip.Response) {
	h := req.GetHeader("Expires")
	if h == nil {
		return m.opts.DefaultExpires, nil
	}
	d, err := registrar.ParseExpires(h.Value())
	if err != nil {
		return 0, sip.NewResponseFromRequest(req, sip.StatusBadRequest, "Bad Expires", nil)
	}
	if d > 0 && d < m.opts.MinExpires {
		res := sipcore.Response(req, sip.StatusIntervalToBrief)
		res.AppendHeader(sip.NewHeader("Min-Expires", strconv.Itoa(int(m.opts.MinExpires/time.Second))))
		return 0, res
	}
	return min(d, m.opts.MaxExpires), nil
}

func tagOf(p sip.HeaderParams) string {
	t, _ := p.Get("tag")
	return t
}

// recordRoute is the dialog's route set as the notifier sees it: the
// Record-Route values in order (RFC 3261 section 12.1.1).
func recordRoute(req *sip.Request) []string {
	var out []string
	for _, h := range req.GetHeaders("Record-Route") {
		for _, v := range strings.Split(h.Value(), ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// localOf is the listener address that received req.
func localOf(req *sip.Request) netip.AddrPort {
	if req.Laddr.IP == nil {
		return netip.AddrPort{}
	}
	ip, ok := netip.AddrFromSlice(req.Laddr.IP)
	if !ok {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(req.Laddr.Port))
}

// accepts reports whether req's Accept headers, if any, take ContentType.
func accepts(req *sip.Request) bool {
	hdrs := req.GetHeaders("Accept")
	if len(hdrs) == 0 {
		return true
	}
	for _, h := range hdrs {
		for _, v := range strings.Split(h.Value(), ",") {
			v, _, _ = strings.Cut(v, ";")
			switch strings.ToLower(strings.TrimSpace(v)) {
			case ContentType, "application/*", "*/*":
				return true
			}
		}
	}
	return false
}
