package tenant_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"pbx/appliance/config"
	"pbx/appliance/routing"
	"pbx/appliance/tenant"
	"pbx/sipcore/registrar"
)

// accountsYAML is a configuration of tenants with perTenant accounts each,
// every account with a password, an extension and a display name.
func accountsYAML(tenants, perTenant int) []byte {
	var sb strings.Builder
	sb.WriteString("configVersion: pbx/v1\nkind: System\nspec: {}\n")
	for t := range tenants {
		fmt.Fprintf(&sb, "---\nconfigVersion: pbx/v1\nkind: Tenant\nmetadata:\n  name: t%03d\nspec:\n  domain: t%03d.example\n", t, t)
		for a := range perTenant {
			fmt.Fprintf(&sb, "---\nconfigVersion: pbx/v1\nkind: Account\nmetadata:\n  tenant: t%03d\n  name: user%05d\n"+
				"spec:\n  password: pw-%03d-%05d-secret-value\n  extension: \"%d\"\n  displayName: User %d of tenant %d\n",
				t, a, t, a, 10000+a, a, t)
		}
	}
	return []byte(sb.String())
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkAccountMemory measures the live heap per configured account at
// 100,000 accounts (100 tenants of 1,000): the loaded configuration the
// process keeps, the tenant directory, the routing table and the digest
// verifier's view, after one credential lookup per account. Issue 16's
// target is at most 2 kB per account in all.
func BenchmarkAccountMemory(b *testing.B) {
	const tenants, perTenant = 100, 1000
	const n = tenants * perTenant
	data := accountsYAML(tenants, perTenant)
	for range b.N {
		base := liveHeap()
		cfg, rep := config.LoadBytes(b.TempDir(), "all.yaml", data, config.Options{Getenv: func(string) string { return "" }})
		if cfg == nil || !rep.OK() {
			b.Fatalf("configuration refused: %v", rep.Err())
		}
		if len(cfg.Accounts) != n {
			b.Fatalf("%d accounts loaded, want %d", len(cfg.Accounts), n)
		}
		loaded := liveHeap()
		dir := tenant.New(cfg)
		table := routing.New(cfg)
		auth, err := registrar.NewAuth(registrar.AuthOptions{}, dir.SIPAccounts())
		if err != nil {
			b.Fatal(err)
		}
		for t := range tenants {
			for a := range perTenant {
				if _, ok := auth.Directory().Account(fmt.Sprintf("t%03d.example", t), fmt.Sprintf("user%05d", a)); !ok {
					b.Fatalf("account %d of tenant %d not found", a, t)
				}
			}
		}
		built := liveHeap()
		b.ReportMetric(float64(built-base)/n, "B/account")
		b.ReportMetric(float64(loaded-base)/n, "config-B/account")
		b.ReportMetric(float64(built-loaded)/n, "lookup-B/account")
		runtime.KeepAlive(cfg)
		runtime.KeepAlive(dir)
		runtime.KeepAlive(table)
		runtime.KeepAlive(auth)
	}
}
