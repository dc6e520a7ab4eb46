package appliance

import (
	"context"
	"errors"
	"net/netip"

	"pbx/appliance/guard"
	"pbx/web/api"
)

// guardSource serves the security routes from the guard. The guard always
// runs: with security.enabled false it lists no bans and still counts
// packets.
type guardSource struct{ g *guard.Guard }

func (s guardSource) Bans(ctx context.Context) ([]api.Ban, error) {
	bans := s.g.Bans()
	out := make([]api.Ban, 0, len(bans))
	for _, b := range bans {
		out = append(out, apiBan(b))
	}
	return out, nil
}

// apiBan is a ban as the management API shows it.
func apiBan(b guard.Ban) api.Ban {
	return api.Ban{IP: b.IP.String(), Reason: b.Reason, Since: b.Since.UTC(), Until: b.Until.UTC(), Offences: b.Offences}
}

func (s guardSource) Counters(ctx context.Context) (api.Counters, error) {
	c := s.g.Counters()
	return api.Counters{
		Packets: c.Packets, Dropped: c.Dropped, Denied: c.Denied, RateLimited: c.RateLimited,
		Banned: c.Banned, AuthFailure: c.AuthFailures, Oversize: c.Oversize, Untracked: c.Untracked,
		Evicted: c.Evicted, BansIssued: c.BansIssued, BansActive: c.BansActive, Tracked: c.Tracked,
		AccountFailures: c.AccountFailures, AccountLocks: c.AccountLocks, AccountRefused: c.AccountRefused,
		AccountsLocked: c.AccountsLocked,
	}, nil
}

func (s guardSource) Lift(ctx context.Context, ip netip.Addr) error {
	if err := s.g.Lift(ip); err != nil {
		if errors.Is(err, guard.ErrNotBanned) {
			return api.ErrNotFound
		}
		return err
	}
	return nil
}
