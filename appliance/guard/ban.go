package guard

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"pbx/appliance/logging"
)

// KindAuthFailure is the log kind of failed authentications: a password
// guesser causes them at will, so the log rate-limits them as one kind.
const KindAuthFailure = "sip.auth_failure"

// Ban is an active ban of one address.
type Ban struct {
	IP       netip.Addr
	Reason   string
	Since    time.Time
	Until    time.Time
	Offences int // this ban included
}

// OnAuthFailure has the shape of the registrar's and the call manager's
// OnAuthFailure hooks: it records the failure of src and against the
// account tried, and logs the account when the failure bans the source.
func (g *Guard) OnAuthFailure(src netip.AddrPort, domain, username string) {
	g.recordAccountFailure(src.Addr().Unmap(), domain, username)
	if b, ok := g.RecordAuthFailure(src); ok {
		g.log.Warn("source banned", "remote", src.Addr().String(), "reason", b.Reason,
			"until", b.Until.UTC().Format(time.RFC3339), "offences", b.Offences, "domain", domain, "username", username)
		if g.onBan != nil {
			g.onBan(b)
		}
		return
	}
	g.log.Debug("authentication failure", "remote", src.String(), "domain", domain, "username", username, logging.KindKey, KindAuthFailure)
}

// RecordAuthFailure counts wrong credentials from src. When they reach
// authFailures within authWindow the address is banned and the ban is
// returned with true.
func (g *Guard) RecordAuthFailure(src netip.AddrPort) (Ban, bool) {
	g.authFails.Add(1)
	if !g.enabled || g.authFailures <= 0 {
		return Ban{}, false
	}
	a := src.Addr().Unmap()
	if !a.IsValid() || g.exempt(a) {
		return Ban{}, false
	}
	now := g.clock()
	sh := g.shardOf(a)
	sh.mu.Lock()
	s := sh.m[a]
	if s == nil {
		if s = g.track(sh, a, now); s == nil {
			sh.mu.Unlock()
			g.failOpen()
			return Ban{}, false
		}
	} else {
		sh.list.touch(s)
	}
	defer sh.mu.Unlock()
	if s.until > now {
		// Requests already in flight when the ban began.
		return Ban{}, false
	}
	keep := s.failures[:0]
	for _, t := range s.failures {
		if now-t < g.authWindow {
			keep = append(keep, t)
		}
	}
	s.failures = append(keep, now)
	if len(s.failures) < g.authFailures {
		return Ban{}, false
	}
	s.failures = s.failures[:0]
	if s.offences > 0 && now-s.until >= g.banMax {
		s.offences = 0
	}
	s.offences++
	s.since, s.until = now, now+g.banFor(s.offences)
	g.bansIssued.Add(1)
	return g.banOf(a, s), true
}

// banFor is banDuration doubled per offence after the first, at most banMax.
func (g *Guard) banFor(offences int) time.Duration {
	d := g.banDuration
	for i := 1; i < offences && d < g.banMax; i++ {
		d *= 2
	}
	return min(d, g.banMax)
}

func (g *Guard) banOf(a netip.Addr, s *source) Ban {
	reason := fmt.Sprintf("%d authentication failures within %s", g.authFailures, g.authWindow)
	return Ban{IP: a, Reason: reason, Since: g.at(s.since), Until: g.at(s.until), Offences: s.offences}
}

// Bans lists the active bans, oldest first. Expired bans are not listed.
func (g *Guard) Bans() []Ban {
	now := g.clock()
	out := []Ban{}
	for i := range g.shard {
		sh := &g.shard[i]
		sh.mu.Lock()
		for a, s := range sh.m {
			if s.until > now {
				out = append(out, g.banOf(a, s))
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(x, y Ban) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return x.IP.Compare(y.IP)
	})
	return out
}

// Lift ends the ban of ip at once and forgets its offences and failures,
// so its next ban starts again at banDuration. ErrNotBanned when ip has no
// active ban.
func (g *Guard) Lift(ip netip.Addr) error {
	a := ip.Unmap()
	now := g.clock()
	sh := g.shardOf(a)
	sh.mu.Lock()
	s := sh.m[a]
	if s == nil || s.until <= now {
		sh.mu.Unlock()
		return fmt.Errorf("lift %s: %w", a, ErrNotBanned)
	}
	b := g.banOf(a, s)
	s.since, s.until, s.offences, s.failures = 0, 0, 0, nil
	sh.mu.Unlock()
	g.log.Info("ban lifted", "remote", a.String())
	if g.onLift != nil {
		g.onLift(b)
	}
	return nil
}
