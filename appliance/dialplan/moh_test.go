package dialplan

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/moh"
	"pbx/rtpcore"
	"pbx/sipcore/b2bua"
)

// TestRouteCarriesTheInboundRoutesMOHClass: a call matched by an
// InboundRoute naming a mohClass carries it in Meta.Extra, where the
// music-on-hold resolver reads it; a route naming none carries nothing.
func TestRouteCarriesTheInboundRoutesMOHClass(t *testing.T) {
	root := t.TempDir()
	w, err := rtpcore.CreateWAV(filepath.Join(root, "sales.wav"), 8000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSamples(make([]int16, 160)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(routerConfig, "  allowInterTenant: true\n", "  allowInterTenant: true\n  moh: {classes: {sales: sales.wav}}\n", 1) + `---
configVersion: pbx/v1
kind: InboundRoute
metadata: {name: sales, tenant: demo}
spec: {did: "+15550111", destination: {type: extension, target: "101"}, mohClass: sales}
`
	r := newTestRouterFrom(t, root, text)
	for did, want := range map[string]string{"+15550111": "sales", "+15550100": ""} {
		in := &b2bua.Inbound{
			Caller:     b2bua.Caller{Kind: b2bua.KindTrunk, Tenant: "demo", Trunk: "pinned"},
			RequestURI: sip.Uri{User: did}, To: sip.Uri{User: did},
		}
		d := route(t, r, in)
		if d.Target == nil || d.Reject != nil {
			t.Fatalf("%s: decision %+v", did, d)
		}
		if got := d.Target.Meta.Extra[moh.ExtraClass]; got != want {
			t.Fatalf("%s: moh class %q, want %q", did, got, want)
		}
	}
}
