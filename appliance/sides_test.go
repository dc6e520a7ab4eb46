package appliance

import (
	"testing"

	"pbx/sipcore/b2bua"
)

func TestSidesOfInterTenantCall(t *testing.T) {
	c := b2bua.CallInfo{Tenant: "acme", Extension: "200", Caller: b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Extension: "100"}}
	if s := sidesOf(&c); len(s) != 2 || s[0] != (side{"acme", "200"}) || s[1] != (side{"demo", "100"}) {
		t.Errorf("inter-tenant sides %+v", s)
	}
	c.Caller.Kind = b2bua.KindMobile // the same call placed from demo 100's app
	if s := sidesOf(&c); len(s) != 2 || s[1] != (side{"demo", "100"}) {
		t.Errorf("an app's inter-tenant call: sides %+v", s)
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
