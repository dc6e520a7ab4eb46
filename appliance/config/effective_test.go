package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeRoot writes files (path relative to the root -> content) into a new
// configuration root and returns it.
func writeRoot(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// loadFiles loads a root made of files with the given environment.
func loadFiles(t testing.TB, files map[string]string, env map[string]string) (*Config, *Report) {
	t.Helper()
	cfg, rep, err := Load(writeRoot(t, files), Options{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, rep
}

// system returns a System document with spec lines indented under spec.
func system(spec string) string {
	return "configVersion: pbx/v1\nkind: System\nspec:\n" + indent(spec, "  ")
}

func tenantDoc(name, spec string) string {
	return "configVersion: pbx/v1\nkind: Tenant\nmetadata:\n  name: " + name + "\nspec:\n  domain: " + name + ".example\n" + indent(spec, "  ")
}

func indent(s, by string) string {
	s = strings.TrimPrefix(s, "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = by + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func docs(ds ...string) string { return strings.Join(ds, "---\n") }

func mustOK(t testing.TB, rep *Report) {
	t.Helper()
	if !rep.OK() {
		t.Fatalf("unexpected problems:\n%v", rep.Err())
	}
}

func TestRoomServiceSecretPrecedence(t *testing.T) {
	const block = `roomservice:
  url: https://rooms.example.com
  apiKey: key
  sipHost: pbx.example.com
`
	for _, tc := range []struct {
		name   string
		extra  string // more roomservice keys
		file   bool   // secrets/rs holds "from-file\n"
		env    string
		want   string
		errors []string // rules of the expected problems
	}{
		{name: "inline", extra: "apiSecret: inline", want: "inline"},
		{name: "file", extra: "apiSecretFile: secrets/rs", file: true, want: "from-file"},
		{name: "env over file", extra: "apiSecretFile: secrets/rs", file: true, env: "from-env", want: "from-env"},
		{name: "env over inline", extra: "apiSecret: inline", env: "from-env", want: "from-env"},
		{name: "env alone", env: "from-env", want: "from-env"},
		{name: "none is valid", want: ""},
		// Both set is refused; the precedence still says which one would apply.
		{name: "file over inline", extra: "apiSecret: inline\napiSecretFile: secrets/rs", file: true, want: "from-file", errors: []string{"roomservice.secretBoth"}},
		{name: "unreadable file", extra: "apiSecretFile: secrets/missing", want: "", errors: []string{"secret.file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"system.yaml": system(block + indent(tc.extra, "  "))}
			if tc.file {
				files["secrets/rs"] = "from-file\n"
			}
			cfg, rep := loadFiles(t, files, map[string]string{EnvRoomServiceSecret: tc.env})
			var rules []string
			for _, p := range rep.Problems {
				rules = append(rules, p.Rule)
			}
			if strings.Join(rules, ",") != strings.Join(tc.errors, ",") {
				t.Errorf("problem rules %v, want %v\n%v", rules, tc.errors, rep.Err())
			}
			rs := cfg.RoomServiceFor(nil)
			if rs == nil {
				t.Fatal("no room service block")
			}
			if rs.Secret.Reveal() != tc.want {
				t.Errorf("effective secret %q, want %q", rs.Secret.Reveal(), tc.want)
			}
		})
	}
}

// TestRoomServiceSecretTenant: the environment variable wins on a tenant's own
// block too, and a tenant's file is read relative to the root.
func TestRoomServiceSecretTenant(t *testing.T) {
	files := map[string]string{
		"tenants/acme.yaml": tenantDoc("acme", `roomservice:
  url: https://rooms.acme.example
  apiKey: acme
  sipHost: pbx.acme.example
  apiSecretFile: secrets/acme
`),
		"secrets/acme": "acme-file\r\n",
	}
	cfg, rep := loadFiles(t, files, nil)
	mustOK(t, rep)
	if got := cfg.RoomServiceFor(cfg.Tenant("acme")).Secret.Reveal(); got != "acme-file" {
		t.Errorf("tenant secret %q, want acme-file (line end trimmed)", got)
	}
	cfg, rep = loadFiles(t, files, map[string]string{EnvRoomServiceSecret: "env"})
	mustOK(t, rep)
	if got := cfg.RoomServiceFor(cfg.Tenant("acme")).Secret.Reveal(); got != "env" {
		t.Errorf("tenant secret %q, want env", got)
	}
}

func TestTTSKeyPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  string
		env   string
		want  string
		rules string
	}{
		{name: "inline", spec: "apiKey: inline", want: "inline"},
		{name: "file over inline", spec: "apiKey: inline\napiKeyFile: tts.key", want: "from-file"},
		{name: "env over file", spec: "apiKey: inline\napiKeyFile: tts.key", env: "from-env", want: "from-env"},
		{name: "env alone", spec: "provider: ttsprovider", env: "from-env", want: "from-env"},
		{name: "nothing", spec: "provider: ttsprovider", want: ""},
		{name: "unreadable file keeps inline", spec: "apiKey: inline\napiKeyFile: nope.key", want: "inline", rules: "secret.file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, rep := loadFiles(t, map[string]string{
				"system.yaml": system("tts:\n" + indent(tc.spec, "  ")),
				"tts.key":     "from-file\n",
			}, map[string]string{EnvTTSAPIKey: tc.env})
			var rules []string
			for _, p := range rep.Problems {
				rules = append(rules, p.Rule)
			}
			if strings.Join(rules, ",") != tc.rules {
				t.Errorf("problem rules %v, want %q", rules, tc.rules)
			}
			if got := cfg.System.TTS.Key.Reveal(); got != tc.want {
				t.Errorf("effective key %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWebhookKey(t *testing.T) {
	hook := func(name, spec string) string {
		return "configVersion: pbx/v1\nkind: Webhook\nmetadata:\n  tenant: acme\n  name: " + name +
			"\nspec:\n  url: https://backend.example/hook\n  events: [mobile.ringing]\n" + indent(spec, "  ")
	}
	cfg, rep := loadFiles(t, map[string]string{
		"t.yaml":     tenantDoc("acme", ""),
		"hooks.yaml": docs(hook("inline", "secret: inline-secret"), hook("file", "secretFile: hook.key")),
		"hook.key":   "file-secret\n",
	}, nil)
	mustOK(t, rep)
	got := map[string]string{}
	for _, w := range cfg.Webhooks {
		got[w.Name] = w.Key.Reveal()
	}
	if got["inline"] != "inline-secret" || got["file"] != "file-secret" {
		t.Errorf("webhook keys %v", got)
	}
}

func TestRoomServiceFor(t *testing.T) {
	const sys = `roomservice:
  url: https://rooms.example.com
  apiKey: system
  sipHost: pbx.example.com
  roomPrefix: sys-
  sipPort: 5070
`
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system(sys),
		"tenants.yaml": docs(
			tenantDoc("inherits", ""),
			tenantDoc("own", "roomservice:\n  url: https://rooms.own.example\n  apiKey: own\n  sipHost: pbx.own.example\n"),
			tenantDoc("off", "roomservice: null\n"),
			tenantDoc("empty", "roomservice:\n"),
		),
	}, nil)
	mustOK(t, rep)
	sysRS := cfg.RoomServiceFor(nil)
	if sysRS == nil || sysRS.APIKey != "system" {
		t.Fatalf("System block: %+v", sysRS)
	}
	if got := cfg.RoomServiceFor(cfg.Tenant("inherits")); got != sysRS {
		t.Errorf("a tenant without the key inherits the System block, got %+v", got)
	}
	own := cfg.RoomServiceFor(cfg.Tenant("own"))
	if own == nil || own.APIKey != "own" || own.URL != "https://rooms.own.example" {
		t.Fatalf("own block: %+v", own)
	}
	// The tenant block replaces the whole System block: nothing is merged in.
	if own.RoomPrefix != "" || own.SIPPort != DefaultRoomServicePort || own.SIPTransport != "udp" {
		t.Errorf("own block took System fields or lost defaults: roomPrefix %q sipPort %d sipTransport %q", own.RoomPrefix, own.SIPPort, own.SIPTransport)
	}
	if got := cfg.RoomServiceFor(cfg.Tenant("off")); got != nil {
		t.Errorf("roomservice: null switches the room service off, got %+v", got)
	}
	if got := cfg.RoomServiceFor(cfg.Tenant("empty")); got != nil {
		t.Errorf("an empty roomservice: (null) switches it off too, got %+v", got)
	}
}

func TestRoomServiceForLivekit(t *testing.T) {
	const lk = "livekit:\n  url: https://rooms.example.com\n  apiKey: legacy\n  sipHost: pbx.example.com\n"
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system(lk),
		"tenants.yaml": docs(
			tenantDoc("inherits", ""),
			tenantDoc("legacy", "livekit:\n  url: https://rooms.legacy.example\n  apiKey: tenant-legacy\n  sipHost: pbx.legacy.example\n"),
			tenantDoc("off", "livekit: null\n"),
		),
	}, map[string]string{EnvRoomServiceSecret: "env"})
	mustOK(t, rep)
	var warned []string
	for _, w := range rep.Warnings {
		if w.Rule == "deprecated.livekit" {
			warned = append(warned, w.Kind+"/"+w.Name)
		}
	}
	if strings.Join(warned, ",") != "System/,Tenant/legacy,Tenant/off" {
		t.Errorf("deprecated.livekit warnings on %v, want System, legacy and off", warned)
	}
	if got := cfg.RoomServiceFor(nil); got == nil || got.APIKey != "legacy" || got.Secret.Reveal() != "env" {
		t.Errorf("System livekit block read as roomservice: %+v", got)
	}
	if got := cfg.RoomServiceFor(cfg.Tenant("inherits")); got == nil || got.APIKey != "legacy" {
		t.Errorf("inherits the System livekit block: %+v", got)
	}
	if got := cfg.RoomServiceFor(cfg.Tenant("legacy")); got == nil || got.APIKey != "tenant-legacy" {
		t.Errorf("tenant livekit block: %+v", got)
	}
	if got := cfg.RoomServiceFor(cfg.Tenant("off")); got != nil {
		t.Errorf("livekit: null switches off: %+v", got)
	}
	// A System without either key: no room service anywhere.
	cfg, rep = loadFiles(t, map[string]string{"t.yaml": tenantDoc("acme", "")}, nil)
	mustOK(t, rep)
	if cfg.RoomServiceFor(nil) != nil || cfg.RoomServiceFor(cfg.Tenant("acme")) != nil {
		t.Error("no block anywhere must mean no room service")
	}
}

func TestSMTPFor(t *testing.T) {
	const sys = `smtp:
  host: mail.example.com
  security: tls
  username: pbx
  password: pw
  from: pbx@example.com
  timeout: 20s
`
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system(sys),
		"tenants.yaml": docs(
			tenantDoc("inherits", ""),
			tenantDoc("from", "smtp:\n  from: voicemail@from.example\n"),
			tenantDoc("plain", "smtp:\n  security: none\n"),
			tenantDoc("port", "smtp:\n  port: 2525\n"),
			tenantDoc("own", "smtp:\n  host: mail.own.example\n  from: vm@own.example\n  security: starttls\n  username: own\n  password: own-pw\n  helo: own.example\n"),
		),
	}, nil)
	mustOK(t, rep)
	sysSMTP := cfg.SMTPFor(nil)
	if sysSMTP == nil || sysSMTP.Port != 465 || sysSMTP.Timeout.D() != 20*time.Second {
		t.Fatalf("System: %+v (want port 465 by security tls)", sysSMTP)
	}
	if got := cfg.SMTPFor(cfg.Tenant("inherits")); *got != *cfg.System.SMTP {
		t.Errorf("no tenant block: got %+v, want the System block", got)
	}
	from := cfg.SMTPFor(cfg.Tenant("from"))
	if from.From != "voicemail@from.example" || from.Host != "mail.example.com" || from.Security != "tls" || from.Port != 465 || from.Username != "pbx" || from.Password.Reveal() != "pw" || from.Timeout.D() != 20*time.Second {
		t.Errorf("field-by-field merge: %+v", from)
	}
	// The tenant changes security and sets no port anywhere: the port follows security.
	if plain := cfg.SMTPFor(cfg.Tenant("plain")); plain.Security != "none" || plain.Port != 25 || plain.Host != "mail.example.com" {
		t.Errorf("security none: %+v (want port 25)", plain)
	}
	if port := cfg.SMTPFor(cfg.Tenant("port")); port.Port != 2525 || port.Security != "tls" {
		t.Errorf("tenant port: %+v", port)
	}
	own := cfg.SMTPFor(cfg.Tenant("own"))
	if own.Host != "mail.own.example" || own.Security != "starttls" || own.Port != 587 || own.Username != "own" || own.HELO != "own.example" || own.Timeout.D() != 20*time.Second {
		t.Errorf("own: %+v", own)
	}
	// The System block itself is untouched by the merges.
	if cfg.System.SMTP.From != "pbx@example.com" || cfg.System.SMTP.Port != 465 {
		t.Errorf("System block changed: %+v", cfg.System.SMTP)
	}
}

func TestSMTPForExplicitPort(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system("smtp:\n  host: mail.example.com\n  from: pbx@example.com\n  port: 2587\n"),
		"t.yaml":      tenantDoc("acme", "smtp:\n  security: tls\n"),
	}, nil)
	mustOK(t, rep)
	// A port the System spelled out is inherited, whatever security the tenant picks.
	if got := cfg.SMTPFor(cfg.Tenant("acme")); got.Port != 2587 || got.Security != "tls" {
		t.Errorf("got %+v, want port 2587 with security tls", got)
	}
}

func TestSMTPForNoSystem(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"t.yaml": docs(tenantDoc("acme", "smtp:\n  host: mail.acme.example\n  from: vm@acme.example\n"), tenantDoc("none", "")),
	}, nil)
	mustOK(t, rep)
	if cfg.SMTPFor(nil) != nil || cfg.SMTPFor(cfg.Tenant("none")) != nil {
		t.Error("no block anywhere must give nil")
	}
	got := cfg.SMTPFor(cfg.Tenant("acme"))
	if got == nil || got.Host != "mail.acme.example" || got.Security != DefaultSMTPSecurity || got.Port != 587 || got.Timeout.D() != DefaultSMTPTimeout {
		t.Errorf("tenant block over defaults: %+v", got)
	}
}

func TestRecordingFor(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system("dataDir: /var/lib/pbx\nrecording:\n  enabled: true\n  mode: inbound\n  storage: local\n"),
		"tenants.yaml": docs(
			tenantDoc("inherits", ""),
			tenantDoc("all", "recording:\n  enabled: true\n  mode: all\n"),
			tenantDoc("off", "recording:\n  enabled: false\n  mode: all\n"),
			tenantDoc("modeonly", "recording:\n  mode: outbound\n"),
			tenantDoc("extra", "recording:\n  enabled: true\n  mode: internal\n  storage: s3\n  keepLocal: false\n"),
		),
	}, nil)
	mustOK(t, rep)
	for _, tc := range []struct {
		tenant  string
		enabled bool
		mode    string
	}{
		{"", true, "inbound"},
		{"inherits", true, "inbound"},
		{"all", true, "all"},
		{"off", false, "none"},
		{"modeonly", false, "none"}, // enabled defaults to false, which collapses mode
		{"extra", true, "internal"},
	} {
		var tn *Tenant
		if tc.tenant != "" {
			tn = cfg.Tenant(tc.tenant)
		}
		enabled, mode := cfg.RecordingFor(tn)
		if enabled != tc.enabled || mode != tc.mode {
			t.Errorf("RecordingFor(%q) = %v, %q; want %v, %q", tc.tenant, enabled, mode, tc.enabled, tc.mode)
		}
	}
	// Only enabled and mode take effect on a tenant: the rest warns.
	var warned []string
	for _, w := range rep.Warnings {
		if w.Rule == "inert.tenantRecording" {
			warned = append(warned, w.Name+":"+w.Path)
		}
	}
	if strings.Join(warned, ",") != "extra:recording.storage,extra:recording.keepLocal" {
		t.Errorf("inert.tenantRecording warnings %v", warned)
	}

	cfg, rep = loadFiles(t, map[string]string{"system.yaml": system("recording:\n  mode: all\n")}, nil)
	mustOK(t, rep)
	if enabled, mode := cfg.RecordingFor(nil); enabled || mode != "none" {
		t.Errorf("System enabled false: %v, %q; want false, none", enabled, mode)
	}
}

func TestLocation(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system("timezone: Europe/Berlin\n"),
		"t.yaml":      docs(tenantDoc("ny", "timezone: America/New_York\n"), tenantDoc("plain", "")),
	}, nil)
	mustOK(t, rep)
	loc := cfg.LocationFunc()
	for tenant, want := range map[string]string{"ny": "America/New_York", "plain": "Europe/Berlin", "": "Europe/Berlin", "unknown": "Europe/Berlin"} {
		if got := loc(tenant).String(); got != want {
			t.Errorf("location of %q = %s, want %s", tenant, got, want)
		}
		if got := cfg.Location(tenant).String(); got != want {
			t.Errorf("Location(%q) = %s, want %s", tenant, got, want)
		}
	}
}

func TestPath(t *testing.T) {
	c := &Config{Root: "/etc/pbx"}
	for in, want := range map[string]string{"": "", "moh/a.wav": "/etc/pbx/moh/a.wav", "/var/lib/pbx": "/var/lib/pbx", "../data": "/etc/data"} {
		if got := c.Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
	c.System.DataDir = "data"
	if c.DataDir() != "/etc/pbx/data" {
		t.Errorf("DataDir() = %q", c.DataDir())
	}
}
