package trunk

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
)

// errRegistration is a final non-2xx answer to a REGISTER.
type errRegistration struct {
	code   int
	reason string
}

func (e *errRegistration) Error() string {
	return fmt.Sprintf("registrar answered %d %s", e.code, e.reason)
}

func (m *Manager) registerLoop(ctx context.Context, s *state) {
	backoff := m.opts.RetryMin
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.register:
			backoff = m.opts.RetryMin
		}
		granted, err := m.registerOnce(ctx, s)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		var wait time.Duration
		s.mu.Lock()
		prevState, prevErr := s.regState, s.lastErr
		if err == nil {
			first := s.regState != StateRegistered
			s.regState, s.expiresAt, s.registered, s.lastErr = StateRegistered, now.Add(granted), now, ""
			s.mu.Unlock()
			// The configured expiry is the period even when the carrier
			// grants longer: the operator chose how soon a lost binding
			// (a carrier restart, a NAT rebinding) is repaired.
			wait = refreshAfter(min(granted, s.period()))
			backoff = m.opts.RetryMin
			if first {
				m.log.Info("trunk registered", "trunk", s.Name, "expires", granted)
			} else {
				m.log.Debug("trunk re-registered", "trunk", s.Name, "expires", granted)
			}
		} else {
			s.regState, s.lastErr = StateFailed, err.Error()
			if !s.expiresAt.After(now) {
				s.expiresAt = time.Time{}
			}
			s.mu.Unlock()
			wait = jitter(backoff)
			m.log.Warn("trunk registration failed", "trunk", s.Name, "err", err, "retry_in", wait.Round(time.Millisecond))
			backoff = min(2*backoff, m.opts.RetryMax)
		}
		if m.opts.OnState != nil {
			if st := s.status(s.AutoIPs); st.State != prevState || st.LastError != prevErr {
				m.opts.OnState(st)
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

// refreshAfter is when to re-register a binding granted for d: at nine
// tenths of it, so the binding never lapses between two REGISTERs.
func refreshAfter(d time.Duration) time.Duration {
	return max(d*9/10, 500*time.Millisecond)
}

// jitter spreads d by up to a fifth either way.
func jitter(d time.Duration) time.Duration {
	f := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * f)
}

// period is the registration period asked for: the configured expiry, or
// what a 423 raised it to.
func (s *state) period() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiryAsked
}

// registerOnce registers at the trunk's destinations in order of
// preference, moving on to the next one when a destination does not answer
// or answers 503 (RFC 3263 section 4.3), and returns the expiry granted.
func (m *Manager) registerOnce(ctx context.Context, s *state) (time.Duration, error) {
	ep, err := m.opts.SIP.Endpoint(s.Transport, s.ListenerID)
	if err != nil {
		return 0, fmt.Errorf("no listener: %w", err)
	}
	dests := s.destinations()
	if len(dests) == 0 {
		// Not resolved yet: let the SIP stack resolve the host itself.
		dests = []netip.AddrPort{{}}
	}
	var granted time.Duration
	for i, dst := range dests {
		granted, err = m.registerAt(ctx, s, ep, dst)
		if err == nil || ctx.Err() != nil || i == len(dests)-1 || !failover(err) {
			break
		}
		m.log.Warn("trunk destination failed; trying the next", "trunk", s.Name, "destination", dst, "err", err, "next", dests[i+1])
	}
	return granted, err
}

// errNoAnswer is a destination that did not answer in time.
var errNoAnswer = errors.New("no answer")

// failover reports whether err lets a client try the next destination:
// no answer at all, or 503 Service Unavailable (RFC 3263 section 4.3).
func failover(err error) bool {
	var e *errRegistration
	return errors.Is(err, errNoAnswer) || (errors.As(err, &e) && e.code == sip.StatusServiceUnavailable)
}

// registerAt sends one REGISTER to dst (answering a digest challenge and a
// 423) and returns the expiry the registrar granted. A zero dst lets the
// SIP stack resolve the trunk's host.
func (m *Manager) registerAt(ctx context.Context, s *state, ep sipcore.Endpoint, dst netip.AddrPort) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.RegisterTimeout)
	defer cancel()
	expiry := s.period()
	for range 3 {
		req := m.buildRegister(s, ep.Contact, ep.Transport, expiry, dst)
		res, err := ep.Client.Do(ctx, req)
		for auth := 0; err == nil && auth < 2 && (res.StatusCode == sip.StatusUnauthorized || res.StatusCode == sip.StatusProxyAuthRequired); auth++ {
			res, err = ep.Client.DoDigestAuth(ctx, req, res, sipgo.DigestAuth{Username: s.Username, Password: s.Password})
		}
		s.mu.Lock()
		s.cseq = req.CSeq().SeqNo + 1
		s.mu.Unlock()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				where := fmt.Sprintf("%s:%d", s.Host, s.Port)
				if dst.IsValid() {
					where = dst.String()
				}
				return 0, fmt.Errorf("%w from %s within %s", errNoAnswer, where, m.opts.RegisterTimeout)
			}
			return 0, err
		}
		switch {
		case res.IsSuccess():
			return granted(res, s.ContactUser, expiry), nil
		case res.StatusCode == 423:
			// Interval Too Brief: ask for what the registrar wants.
			min := headerSeconds(res, "Min-Expires")
			if min <= expiry {
				return 0, &errRegistration{res.StatusCode, res.Reason}
			}
			expiry = min
			s.mu.Lock()
			s.expiryAsked = min
			s.mu.Unlock()
			continue
		default:
			return 0, &errRegistration{res.StatusCode, res.Reason}
		}
	}
	return 0, errors.New("registrar keeps refusing the expiry")
}

func (m *Manager) buildRegister(s *state, contact sip.ContactHeader, transport string, expiry time.Duration, dst netip.AddrPort) *sip.Request {
	ruri := sip.Uri{Scheme: "sip", Host: s.Host, Port: s.Port}
	if s.SRV {
		// No port was configured: the URI names the domain alone and DNS
		// says where it is served (RFC 3263).
		ruri.Port = 0
	}
	if transport == "tcp" {
		ruri.UriParams = sip.HeaderParams{{K: "transport", V: "tcp"}}
	}
	req := sip.NewRequest(sip.REGISTER, ruri)
	req.SetTransport(strings.ToUpper(transport))
	if dst.IsValid() {
		req.SetDestination(dst.String())
	}
	aor := sip.Uri{Scheme: "sip", User: s.Username, Host: s.Host}
	from := &sip.FromHeader{Address: aor}
	s.mu.Lock()
	from.Params.Add("tag", s.fromTag)
	callID := sip.CallIDHeader(s.callID)
	cseq := &sip.CSeqHeader{SeqNo: s.cseq, MethodName: sip.REGISTER}
	s.mu.Unlock()
	req.AppendHeader(from)
	req.AppendHeader(&sip.ToHeader{Address: aor})
	req.AppendHeader(&callID)
	req.AppendHeader(cseq)
	mf := sip.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	ct := sip.HeaderClone(&contact).(*sip.ContactHeader)
	ct.Address.User = s.ContactUser
	req.AppendHeader(ct)
	exp := sip.ExpiresHeader(uint32(expiry / time.Second))
	req.AppendHeader(&exp)
	m.opts.SIP.DecorateRequest(req)
	req.SetBody(nil)
	return req
}

// granted reads the expiry the registrar granted: the expires parameter of
// our Contact (the one with our contact user), else the Expires header,
// else what was asked.
func granted(res *sip.Response, user string, asked time.Duration) time.Duration {
	for _, h := range res.GetHeaders("Contact") {
		ct, ok := h.(*sip.ContactHeader)
		if !ok || ct.Address.User != user {
			continue
		}
		if v, ok := ct.Params.Get("expires"); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	if n := headerSeconds(res, "Expires"); n > 0 {
		return n
	}
	return asked
}

func headerSeconds(res *sip.Response, name string) time.Duration {
	h := res.GetHeader(name)
	if h == nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(h.Value()))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
