package appliance

import (
	"testing"

	"pbx/sipcore/b2bua"
)

func TestRecordedByMatchesWhereTheCallWent(t *testing.T) {
	phone := b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo"}
	carrier := b2bua.Caller{Kind: b2bua.KindTrunk, Trunk: "carrier"}
	trunk := b2bua.Meta{Egress: b2bua.KindTrunk}
	for _, tc := range []struct {
		name string
		c    b2bua.CallInfo
		want map[string]bool
	}{
		{"internal", b2bua.CallInfo{Caller: phone, Direction: "internal"}, map[string]bool{"internal": true, "all": true}},
		{"outbound", b2bua.CallInfo{Caller: phone, Direction: "outbound", Meta: trunk}, map[string]bool{"outbound": true, "all": true}},
		{"inbound", b2bua.CallInfo{Caller: carrier, Direction: "inbound"}, map[string]bool{"inbound": true, "all": true}},
		{"forwarded to a carrier", b2bua.CallInfo{Caller: carrier, Direction: "inbound", Meta: trunk},
			map[string]bool{"inbound": true, "outbound": true, "all": true}},
	} {
		for _, mode := range []string{"none", "inbound", "outbound", "internal", "all"} {
			if got := recordedBy(mode, &tc.c); got != tc.want[mode] {
				t.Errorf("%s call, mode %s: recorded %t", tc.name, mode, got)
			}
		}
	}
}

func TestSidesOfInterTenantCall(t *testing.T) {
	c := b2bua.CallInfo{Tenant: "acme", Extension: "200", Caller: b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Extension: "100"}}
	if s := sidesOf(&c); len(s) != 2 || s[0] != (side{"acme", "200"}) || s[1] != (side{"demo", "100"}) {
		t.Errorf("inter-tenant sides %+v", s)
	}
	c.Caller.Tenant = "acme"
	if s := sidesOf(&c); len(s) != 1 {
		t.Errorf("one tenant's call: sides %+v", s)
	}
	c.Caller = b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: "demo"} // a trunk pinned to demo delivering to acme
	if s := sidesOf(&c); len(s) != 1 || s[0].Tenant != "acme" {
		t.Errorf("a trunk's call: sides %+v", s)
	}
	if s := sidesOf(&b2bua.CallInfo{}); len(s) != 0 {
		t.Errorf("a call of no tenant: sides %+v", s)
	}
}
