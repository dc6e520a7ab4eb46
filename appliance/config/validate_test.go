package config

import "testing"

// TestDataDirWithoutSystem: with no System document at all, a tenant that needs
// dataDir is told so at its own line, not at an empty file name and line 0.
func TestDataDirWithoutSystem(t *testing.T) {
	_, rep := loadFiles(t, map[string]string{
		"tenants.yaml": tenantDoc("acme", "recording:\n  enabled: true\n  mode: all\nmailboxes:\n  - extension: \"100\"\n") +
			"---\nconfigVersion: pbx/v1\nkind: Account\nmetadata:\n  tenant: acme\n  name: alice\nspec:\n  password: pw\n  extension: \"100\"\n",
	}, nil)
	want := "tenants.yaml:8: Tenant/acme: recording.enabled: dataDir is required because of recording on Tenant/acme, mailboxes on Tenant/acme; set dataDir in a System document"
	if len(rep.Problems) != 1 || rep.Problems[0].String() != want || rep.Problems[0].Rule != "dataDir.required" {
		t.Errorf("got %v\nwant %s", rep.Problems, want)
	}
}
