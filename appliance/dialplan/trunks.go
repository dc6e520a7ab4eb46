package dialplan

import (
	"net/netip"

	"pbx/appliance/config"
	"pbx/sipcore/trunk"
)

// TrunkSpecs turns Trunk documents into what the trunk manager runs.
func TrunkSpecs(trunks []*config.Trunk) []trunk.Trunk {
	out := make([]trunk.Trunk, 0, len(trunks))
	for _, t := range trunks {
		spec := trunk.Trunk{
			Name: t.Name, Tenant: t.Tenant, Host: t.Host, Port: t.Port, SRV: !t.Meta.Has("port"), Transport: t.Transport, ListenerID: t.TransportID,
			Username: t.Auth.Username, Password: t.Auth.Password.Reveal(),
			Register: t.Registration.Enabled, Expiry: t.Registration.Expiry.D(), ContactUser: t.Registration.ContactUser,
			AutoIPs: t.Inbound.AutoIPs,
		}
		for _, m := range t.Inbound.MatchIPs {
			if p, err := netip.ParsePrefix(m); err == nil {
				spec.MatchIPs = append(spec.MatchIPs, p)
			} else if ip, err := netip.ParseAddr(m); err == nil {
				spec.MatchIPs = append(spec.MatchIPs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			}
		}
		out = append(out, spec)
	}
	return out
}
