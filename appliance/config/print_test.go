package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func printed(t *testing.T, c *Config) string {
	t.Helper()
	var b bytes.Buffer
	if err := Print(&b, c); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestPrintMinimal: the minimal configuration prints with every default filled.
func TestPrintMinimal(t *testing.T) {
	cfg, rep := loadDir(t, "testdata/good/minimal")
	mustOK(t, rep)
	out := printed(t, cfg)
	golden(t, filepath.Join("testdata", "print", "minimal.yaml"), out)
	for _, want := range []string{
		"configVersion: pbx/v1\nkind: System\nspec:\n",
		"    bindHost: 0.0.0.0\n    bindPort: 5060\n",
		"      - transport: udp\n        id: udp\n        bindHost: 0.0.0.0\n        bindPort: 5060\n        srtp: \"off\"\n",
		"    userAgent: pbx\n    contactUser: pbx\n",
		"    codecs:\n      - alaw\n      - ulaw\n",
		"    mode: none\n    storage: local\n    keepLocal: true\n",
		"    maxMessage: 3m\n",
		"    bindHost: 127.0.0.1\n",
		"      requestsPerMinute: 300\n      burst: 60\n",
		"      presignTtl: 15m\n",
		"    packetRate: 50\n    packetBurst: 200\n    authFailures: 5\n    authWindow: 10m\n    banDuration: 10m\n    banMax: 24h\n    maxTracked: 20000\n",
		"    trustLoopback: true\n",
		"  roomservice: null\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("print lacks %q", want)
		}
	}
	if strings.Contains(out, "livekit") {
		t.Error("print shows the deprecated livekit key")
	}
}

// TestPrintFull: secrets are redacted, and the printed configuration, put back in
// place of the documents, loads to the same effective configuration.
func TestPrintFull(t *testing.T) {
	cfg, rep := loadDir(t, "testdata/good/full")
	mustOK(t, rep)
	out := printed(t, cfg)
	golden(t, filepath.Join("testdata", "print", "full.yaml"), out)
	for _, plain := range fullSecrets {
		if strings.Contains(out, plain) {
			t.Errorf("print shows the secret %q", plain)
		}
	}
	if n := strings.Count(out, "'[redacted]'"); n < 10 {
		t.Errorf("only %d redacted secrets in the print", n)
	}

	root := copyTree(t, "testdata/good/full")
	docsIn, err := findDocuments(root)
	if err != nil || len(docsIn) < 5 {
		t.Fatalf("documents of the copy: %v %v", docsIn, err)
	}
	for _, f := range docsIn {
		if err := os.Remove(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "printed.yaml"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	again, rep := loadDir(t, root)
	// The only problems are the redacted plaintext token and PIN: "[redacted]" is
	// neither 32 characters long nor digits.
	for _, p := range rep.Problems {
		if p.Rule != "token.short" && p.Rule != "mailbox.pin" {
			t.Errorf("printed configuration: %s", p)
		}
	}
	if len(again.Tenants) != len(cfg.Tenants) || len(again.Accounts) != len(cfg.Accounts) || len(again.Trunks) != len(cfg.Trunks) ||
		len(again.InboundRoutes) != len(cfg.InboundRoutes) || len(again.OutboundRoutes) != len(cfg.OutboundRoutes) ||
		len(again.InboundOverrides) != len(cfg.InboundOverrides) || len(again.Webhooks) != len(cfg.Webhooks) {
		t.Fatal("document counts differ after printing")
	}
	noSecrets := func(rs *RoomService) *RoomService {
		if rs == nil {
			return nil
		}
		c := *rs
		c.APISecret, c.Secret, c.Auth.Password = "", "", ""
		if len(c.MatchIPs) == 0 {
			c.MatchIPs = nil // printed as [], read back empty: the same
		}
		return &c
	}
	for _, tn := range append([]*Tenant{nil}, cfg.Tenants...) {
		name := ""
		var tb *Tenant
		if tn != nil {
			name, tb = tn.Name, again.Tenant(tn.Name)
		}
		if a, b := noSecrets(cfg.RoomServiceFor(tn)), noSecrets(again.RoomServiceFor(tb)); !reflect.DeepEqual(a, b) {
			t.Errorf("tenant %q room service: %+v, after print %+v", name, a, b)
		}
		a, b := cfg.SMTPFor(tn), again.SMTPFor(tb)
		if a != nil && b != nil {
			a, b := *a, *b
			a.Password, b.Password = "", ""
			if a != b {
				t.Errorf("tenant %q SMTP: %+v, after print %+v", name, a, b)
			}
		} else if a != b {
			t.Errorf("tenant %q SMTP: %v, after print %v", name, a, b)
		}
		e1, m1 := cfg.RecordingFor(tn)
		e2, m2 := again.RecordingFor(tb)
		if e1 != e2 || m1 != m2 {
			t.Errorf("tenant %q recording %v/%s, after print %v/%s", name, e1, m1, e2, m2)
		}
	}
	if !reflect.DeepEqual(cfg.System.Security, again.System.Security) || !reflect.DeepEqual(cfg.System.Media, again.System.Media) {
		t.Error("security or media differ after printing")
	}
}

// TestPrintLivekit: a configuration still using livekit prints it as roomservice,
// and a tenant that switched the room service off stays off.
func TestPrintLivekit(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system("livekit:\n  url: https://rooms.example.com\n  apiKey: legacy\n  sipHost: pbx.example.com\n"),
		"t.yaml":      docs(tenantDoc("inherits", ""), tenantDoc("off", "roomservice: null\n")),
	}, nil)
	mustOK(t, rep)
	out := printed(t, cfg)
	if strings.Contains(out, "livekit") {
		t.Errorf("print shows livekit:\n%s", out)
	}
	again, rep := LoadBytes(t.TempDir(), "printed.yaml", []byte(out), Options{Getenv: noEnv})
	mustOK(t, rep)
	if rs := again.RoomServiceFor(again.Tenant("inherits")); rs == nil || rs.APIKey != "legacy" {
		t.Errorf("inheriting tenant after print: %+v", rs)
	}
	if rs := again.RoomServiceFor(again.Tenant("off")); rs != nil {
		t.Errorf("switched-off tenant after print: %+v", rs)
	}
}
