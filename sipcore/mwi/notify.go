package mwi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/registrar"
)

// Body is the application/simple-message-summary body (RFC 3842 section
// 5.2) for account with the given counts; urgent counts are always 0.
func Body(account string, newMessages, oldMessages int) string {
	waiting := "no"
	if newMessages > 0 {
		waiting = "yes"
	}
	return "Messages-Waiting: " + waiting + "\r\nMessage-Account: " + account +
		"\r\nVoice-Message: " + strconv.Itoa(newMessages) + "/" + strconv.Itoa(oldMessages) + " (0/0)\r\n"
}

// send sends sb a NOTIFY with the mailbox's current counts: the final one
// (terminated;reason=timeout) when final, else an active one, skipped once
// sb has ended. A NOTIFY answered 481 or 408, or not at all, ends sb.
func (m *Manager) send(sb *sub, final bool) {
	sb.sendMu.Lock()
	defer sb.sendMu.Unlock()
	sb.mu.Lock()
	if sb.ended != final {
		sb.mu.Unlock()
		return
	}
	sb.s.LocalCSeq++
	s := sb.s
	sb.mu.Unlock()
	if !final {
		// The CSeq is stored before the NOTIFY leaves, so that one sent
		// after a restart is always above it.
		m.save(sb, nil)
	}

	state := "terminated;reason=timeout"
	if !final {
		secs := int((time.Until(s.Expires) + time.Second - 1) / time.Second)
		if secs <= 0 {
			return // the expiry timer sends the final one
		}
		state = "active;expires=" + strconv.Itoa(secs)
	}
	newMsgs, oldMsgs := m.opts.Mailboxes.Summary(s.Mailbox)
	status, err := m.notify(s, state, Body(s.Account, newMsgs, oldMsgs))
	switch {
	case err == nil && status >= 200 && status < 300:
		m.log.Debug("mwi notify answered", "subscriber", s.Subscriber, "account", s.Account, "state", state, "new", newMsgs, "old", oldMsgs)
		return
	case final:
		m.log.Debug("final mwi notify not answered", "subscriber", s.Subscriber, "status", status, "err", err)
		return
	case err != nil || status == sip.StatusCallTransactionDoesNotExists || status == sip.StatusRequestTimeout:
		// RFC 6665 section 4.2.2: the subscriber is gone.
		if m.remove(sb) {
			m.save(nil, sb)
			m.log.Info("mwi subscription dropped: notify failed", "subscriber", s.Subscriber, "account", s.Account, "status", status, "err", err)
		}
	default:
		m.log.Debug("mwi notify refused", "subscriber", s.Subscriber, "status", status)
	}
}

// notify sends one NOTIFY in s's dialog and returns the final status.
func (m *Manager) notify(s Subscription, state, body string) (int, error) {
	b := registrar.Binding{Contact: s.RemoteTarget, Source: s.Source, Transport: s.Transport, Local: s.Local}
	tg, ok := b.Target(m.opts.SIP.ConnectionOpen)
	if !ok {
		return 0, fmt.Errorf("subscriber contact %q: no destination", s.RemoteTarget)
	}
	ep, err := m.opts.SIP.EndpointForLocal(tg.Transport, s.Local)
	if err != nil {
		return 0, fmt.Errorf("notify: %w", err)
	}
	req := sip.NewRequest(sip.NOTIFY, tg.URI)
	req.SetTransport(strings.ToUpper(tg.Transport))
	if len(s.RouteSet) == 0 {
		req.SetDestination(tg.Destination.String())
	}
	for _, r := range s.RouteSet {
		req.AppendHeader(sip.NewHeader("Route", r))
	}
	var local, remote sip.Uri
	if err := sip.ParseUri(s.LocalURI, &local); err != nil {
		return 0, fmt.Errorf("local uri %q: %w", s.LocalURI, err)
	}
	if err := sip.ParseUri(s.RemoteURI, &remote); err != nil {
		return 0, fmt.Errorf("remote uri %q: %w", s.RemoteURI, err)
	}
	from := &sip.FromHeader{Address: local}
	from.Params.Add("tag", s.LocalTag)
	to := &sip.ToHeader{Address: remote}
	to.Params.Add("tag", s.RemoteTag)
	req.AppendHeader(from)
	req.AppendHeader(to)
	callID := sip.CallIDHeader(s.CallID)
	req.AppendHeader(&callID)
	req.AppendHeader(&sip.CSeqHeader{SeqNo: s.LocalCSeq, MethodName: sip.NOTIFY})
	mf := sip.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	req.AppendHeader(sip.HeaderClone(&ep.Contact))
	m.opts.SIP.DecorateRequest(req)
	req.AppendHeader(sip.NewHeader("Event", EventPackage))
	req.AppendHeader(sip.NewHeader("Subscription-State", state))
	req.AppendHeader(sip.NewHeader("Content-Type", ContentType))
	req.SetBody([]byte(body))
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	res, err := ep.Client.Do(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("notify %s: %w", tg.Destination, err)
	}
	return res.StatusCode, nil
}
