package config

import (
	"fmt"
	"strings"
)

// security checks the System security block: no negative bound, address
// lists, and its limits.
func (v *validator) security(m *Meta, s *Security) {
	neg := func(path string, bad bool) {
		if bad {
			v.errf(m, path, "security.negative", "must not be negative")
		}
	}
	neg("security.packetRate", s.PacketRate < 0)
	neg("security.packetBurst", s.PacketBurst < 0)
	neg("security.authFailures", s.AuthFailures < 0)
	neg("security.maxTracked", s.MaxTracked < 0)
	neg("security.authWindow", s.AuthWindow < 0)
	neg("security.banDuration", s.BanDuration < 0)
	neg("security.banMax", s.BanMax < 0)
	neg("security.accountFailures", s.AccountFailures < 0)
	neg("security.accountWindow", s.AccountWindow < 0)
	neg("security.accountLock", s.AccountLock < 0)
	if s.BanDuration > s.BanMax {
		v.errf(m, "security.banDuration", "security.banDuration", "banDuration (%s) is longer than banMax (%s)", s.BanDuration, s.BanMax)
	}
	v.prefixes(m, "security.allow", "security.prefix", s.Allow)
	v.prefixes(m, "security.deny", "security.prefix", s.Deny)
	v.prefixes(m, "security.acl.register.allow", "security.prefix", s.ACL.Register.Allow)
	v.prefixes(m, "security.acl.register.deny", "security.prefix", s.ACL.Register.Deny)
	v.prefixes(m, "security.acl.invite.allow", "security.prefix", s.ACL.Invite.Allow)
	v.prefixes(m, "security.acl.invite.deny", "security.prefix", s.ACL.Invite.Deny)
	if m.Has("security.acl") {
		v.warnf(m, "security.acl", "inert.acl", "security.acl is validated but never read")
	}
	if s.RequireSRTP {
		v.warnf(m, "security.requireSrtp", "inert.requireSrtp", "requireSrtp is validated but never read: every call is plain RTP")
	}
	v.limits(m, "security.limits", &s.Limits)
}

// limits checks a limits block, the System's (security.limits) or a tenant's.
func (v *validator) limits(m *Meta, path string, l *Limits) {
	for _, f := range []struct {
		key string
		bad bool
	}{
		{"maxConcurrentCalls", l.MaxConcurrentCalls < 0},
		{"maxConcurrentPerAccount", l.MaxConcurrentPerAccount < 0},
		{"maxOutboundPerMinute", l.MaxOutboundPerMinute < 0},
		{"outboundMinutesPerHour", l.OutboundMinutesPerHour < 0},
		{"outboundMinutesPerMonth", l.OutboundMinutesPerMonth < 0},
	} {
		if f.bad {
			v.errf(m, path+"."+f.key, "security.limits", "must not be negative")
		}
	}
	for i, p := range l.BlockedPrefixes {
		if strings.TrimSpace(p) == "" {
			v.errf(m, fmt.Sprintf("%s.blockedPrefixes[%d]", path, i), "security.blockedPrefix", "an empty blocked prefix would block every number")
		}
	}
}
