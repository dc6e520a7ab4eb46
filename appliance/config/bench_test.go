package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLarge writes a configuration of tenants tenants with accounts accounts each,
// two inbound routes and an outbound route per tenant, a ring group and a mailbox,
// and a few shared trunks and global routes.
func writeLarge(tb testing.TB, root string, tenants, accounts int) {
	tb.Helper()
	write := func(name, content string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	write("system.yaml", system(`sip:
  transports: [udp, tcp]
dataDir: /var/lib/pbx
cdr:
  enabled: true
  retention: 2160h
recording:
  enabled: true
  mode: inbound
voicemail:
  enabled: true
security:
  enabled: true
  limits:
    maxConcurrentCalls: 500
api:
  enabled: true
  bindPort: 8080
  tokens:
    - name: ops
      hash: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
      scopes: [status:read, cdr:read]
`))
	var trunks []string
	for i := range 5 {
		trunks = append(trunks, fmt.Sprintf("configVersion: pbx/v1\nkind: Trunk\nmetadata:\n  name: carrier-%d\nspec:\n  host: sip%d.carrier.example\n  inbound:\n    matchIps: [203.0.113.%d]\n", i, i, i+1))
		trunks = append(trunks, fmt.Sprintf("configVersion: pbx/v1\nkind: OutboundRoute\nmetadata:\n  name: global-%d\nspec:\n  priority: %d\n  pattern: \"^%d[0-9]+$\"\n  strip: 1\n  trunk: carrier-%d\n", i, i, i, i))
	}
	write("trunks.yaml", docs(trunks...))
	for ti := range tenants {
		tn := fmt.Sprintf("t%04d", ti)
		var b strings.Builder
		fmt.Fprintf(&b, "configVersion: pbx/v1\nkind: Tenant\nmetadata:\n  name: %s\nspec:\n  domain: %s.example.com\n  ringGroups:\n    - name: all\n      extensions: [\"100\", \"101\", \"102\"]\n  mailboxes:\n    - extension: \"100\"\n      pin: \"1234\"\n", tn, tn)
		for ai := range accounts {
			fmt.Fprintf(&b, "---\nconfigVersion: pbx/v1\nkind: Account\nmetadata:\n  tenant: %s\n  name: u%d\nspec:\n  password: pw-%s-%d\n  extension: \"%d\"\n  displayName: User %d\n", tn, ai, tn, ai, 100+ai, ai)
		}
		write(filepath.Join("tenants", tn, "tenant.yaml"), b.String())
		write(filepath.Join("tenants", tn, "routes.yaml"), docs(
			fmt.Sprintf("configVersion: pbx/v1\nkind: InboundRoute\nmetadata:\n  tenant: %s\n  name: main\nspec:\n  did: \"+4930%06d\"\n  destination:\n    type: ring_group\n    target: all\n", tn, ti*10),
			fmt.Sprintf("configVersion: pbx/v1\nkind: InboundRoute\nmetadata:\n  tenant: %s\n  name: direct\nspec:\n  did: \"+4930%06d\"\n  destination:\n    type: extension\n    target: \"101\"\n", tn, ti*10+1),
			fmt.Sprintf("configVersion: pbx/v1\nkind: OutboundRoute\nmetadata:\n  tenant: %s\n  name: national\nspec:\n  pattern: \"^0[1-9]\"\n  trunk: carrier-%d\n", tn, ti%5),
		))
	}
}

// BenchmarkValidateLarge loads and validates 1,000 tenants with 20,000 accounts,
// 2,000 inbound and 1,005 outbound routes in 2,002 files.
func BenchmarkValidateLarge(b *testing.B) {
	root := b.TempDir()
	writeLarge(b, root, 1000, 20)
	cfg, rep, err := Load(root, Options{Getenv: noEnv})
	if err != nil || !rep.OK() {
		b.Fatalf("generated configuration: %v %v", err, rep.Err())
	}
	if len(cfg.Accounts) != 20000 || len(cfg.Tenants) != 1000 {
		b.Fatalf("%d tenants, %d accounts", len(cfg.Tenants), len(cfg.Accounts))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, rep, err := Load(root, Options{Getenv: noEnv}); err != nil || !rep.OK() {
			b.Fatal(err)
		}
	}
}

// TestLargeConfigurationCrossChecks: among hundreds of tenants, a domain claimed
// twice (case does not matter) and a DID claimed by two tenants are each found once,
// on the document read second (files are read in name order: extra.yaml first).
func TestLargeConfigurationCrossChecks(t *testing.T) {
	root := t.TempDir()
	writeLarge(t, root, 200, 5)
	if err := os.WriteFile(filepath.Join(root, "extra.yaml"), []byte(docs(
		"configVersion: pbx/v1\nkind: Tenant\nmetadata:\n  name: dup\nspec:\n  domain: T0007.example.com\n",
		"configVersion: pbx/v1\nkind: InboundRoute\nmetadata:\n  tenant: dup\n  name: stolen\nspec:\n  did: \"+4930000070\"\n  destination:\n    type: hangup\n",
	)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, rep, err := Load(root, Options{Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.Rule+" "+p.Kind+"/"+p.Name)
	}
	want := "did.duplicate InboundRoute/t0007/main,tenant.domainDuplicate Tenant/t0007"
	if strings.Join(got, ",") != want {
		t.Errorf("problems %v, want %s", got, want)
	}
}
