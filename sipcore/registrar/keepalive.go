package registrar

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
)

// Keepalive defaults.
const (
	// DefaultKeepaliveInterval is how often a phone behind NAT is pinged:
	// often enough for the shortest common UDP mapping timeouts (30-60 s).
	DefaultKeepaliveInterval = 30 * time.Second
	// DefaultNATExpires caps the expiry granted over UDP to a phone behind
	// NAT, so that a mapping lost despite the keepalives is repaired by the
	// phone's own re-registration within minutes rather than an hour.
	DefaultNATExpires = 120 * time.Second
	// keepaliveTimeout bounds one OPTIONS keepalive.
	keepaliveTimeout = 5 * time.Second
	// keepaliveWorkers bounds the OPTIONS in flight at once.
	keepaliveWorkers = 16
)

// KeepaliveStats counts the keepalives sent to phones behind NAT.
type KeepaliveStats struct {
	Sent     uint64 // OPTIONS and CRLF pings sent
	Answered uint64 // OPTIONS answered with any response
	Failed   uint64 // OPTIONS unanswered, or pings that could not be written
}

type keepaliveCounters struct {
	sent, answered, failed atomic.Uint64
}

// KeepaliveStats returns the keepalive counters.
func (r *Registrar) KeepaliveStats() KeepaliveStats {
	return KeepaliveStats{Sent: r.ka.sent.Load(), Answered: r.ka.answered.Load(), Failed: r.ka.failed.Load()}
}

// natExpiry caps exp for a phone behind NAT over UDP.
func (r *Registrar) natExpiry(exp time.Duration, transport string, contact sip.Uri, src netip.AddrPort) time.Duration {
	if r.opts.NATExpires <= 0 || transport != "udp" {
		return exp
	}
	c, isIP := contactAddrPort(contact, transport)
	if isIP && !behindNAT(c, src) {
		return exp
	}
	return min(exp, r.opts.NATExpires)
}

// keepaliveLoop pings every binding behind NAT each KeepaliveInterval until
// ctx ends: OPTIONS over UDP (any answer proves the mapping is open), a
// CRLF ping over TCP (RFC 5626 section 3.5.1).
func (r *Registrar) keepaliveLoop(ctx context.Context) {
	t := time.NewTicker(r.opts.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.keepaliveRound(ctx)
		}
	}
}

// keepaliveRound pings each binding behind NAT once, with at most
// keepaliveWorkers OPTIONS in flight, and returns when all are done.
func (r *Registrar) keepaliveRound(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, keepaliveWorkers)
	for _, b := range r.natBindings() {
		if b.Transport == sipcore.TransportTCP {
			r.ka.sent.Add(1)
			if err := r.opts.SIP.PingTCP(b.Source.String()); err != nil {
				r.ka.failed.Add(1)
				r.log.Debug("keepalive ping", "aor", b.Username, "tenant", b.Tenant, "remote", b.Source, "err", err)
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.ka.sent.Add(1)
			if err := r.sendOptions(ctx, b); err != nil {
				r.ka.failed.Add(1)
				r.log.Debug("keepalive OPTIONS unanswered", "aor", b.Username, "tenant", b.Tenant, "remote", b.Source, "err", err)
				return
			}
			r.ka.answered.Add(1)
		}()
	}
	wg.Wait()
}

// natBindings returns the live bindings behind NAT with a known source:
// those a keepalive round pings. It copies only them, unsorted: a round
// through List (every binding copied and sorted) took 2.2 ms and allocated
// 2.8 MB at 2,000 registered phones none of which is behind NAT, against
// 0.35 ms and 0.29 MB (BenchmarkNATBindings). The NAT test parses each
// Contact under the registrar's read lock, about 0.2 µs a binding.
func (r *Registrar) natBindings() []Binding {
	return r.live(func(b *Binding) bool { return b.Source.IsValid() && b.BehindNAT() })
}

// sendOptions sends one out-of-dialog OPTIONS to b's Contact through its
// NAT mapping, from the listener that received the registration.
func (r *Registrar) sendOptions(ctx context.Context, b Binding) error {
	tg, ok := b.Target(nil)
	if !ok {
		return fmt.Errorf("binding %s: no target", b.Contact)
	}
	ep, err := r.opts.SIP.EndpointForLocal(tg.Transport, tg.Local)
	if err != nil {
		return err
	}
	req := sip.NewRequest(sip.OPTIONS, tg.URI)
	req.SetTransport(ep.Transport)
	req.SetDestination(b.Source.String())
	from := &sip.FromHeader{Address: sip.Uri{Scheme: "sip", User: ep.Contact.Address.User, Host: b.Domain}}
	from.Params.Add("tag", sip.GenerateTagN(16))
	req.AppendHeader(from)
	req.AppendHeader(&sip.ToHeader{Address: tg.URI})
	req.AppendHeader(sip.HeaderClone(&ep.Contact))
	mf := sip.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	r.opts.SIP.DecorateRequest(req)
	ctx, cancel := context.WithTimeout(ctx, keepaliveTimeout)
	defer cancel()
	if _, err := ep.Client.Do(ctx, req); err != nil {
		return err
	}
	return nil
}
