package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDefaultsMinimal checks every default the specification gives, on the minimal
// good configuration (a System with an empty spec).
func TestDefaultsMinimal(t *testing.T) {
	cfg, rep := loadDir(t, "testdata/good/minimal")
	mustOK(t, rep)
	s := cfg.System
	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", name, got, want)
		}
	}
	check("sip.bindHost", s.SIP.BindHost, "0.0.0.0")
	check("sip.bindPort", s.SIP.BindPort, 5060)
	check("sip.transports", s.SIP.Transports, []Listener{{Transport: "udp", ID: "udp", BindHost: "0.0.0.0", BindPort: 5060, SRTP: "off", Bare: true}})
	check("sip.userAgent", *s.SIP.UserAgent, "pbx")
	check("sip.contactUser", *s.SIP.ContactUser, "pbx")
	check("sip.externalHost", s.SIP.ExternalHost, "")
	check("sip.tls", s.SIP.TLS, (*TLS)(nil))
	check("media.codecs", s.Media.Codecs, []string{"alaw", "ulaw"})
	check("media.rtpPortMin", s.Media.RTPPortMin, 0)
	check("media.rtpPortMax", s.Media.RTPPortMax, 0)
	check("media.savpProfile", s.Media.SAVPProfile, "")
	check("moh", s.MOH, (*MOH)(nil))
	check("defaultTrunk", s.DefaultTrunk, "")
	check("timezone", s.Timezone, "")
	check("allowInterTenant", s.AllowInterTenant, false)
	check("dataDir", s.DataDir, "")
	check("cdr", s.CDR, CDR{})
	check("recording", s.Recording, Recording{Enabled: false, Mode: "none", Storage: "local", KeepLocal: true})
	check("storage", s.Storage, (*Storage)(nil))
	check("voicemail", s.Voicemail, Voicemail{MaxMessage: Duration(3 * time.Minute), MWI: true})
	check("smtp", s.SMTP, (*SMTP)(nil))
	check("tts", s.TTS, (*TTS)(nil))
	check("api.enabled", s.API.Enabled, false)
	check("api.bindHost", s.API.BindHost, "127.0.0.1")
	check("api.bindPort", s.API.BindPort, 0)
	check("api.rateLimit", s.API.RateLimit, RateLimit{RequestsPerMinute: 300, Burst: 60})
	check("api.cors", len(s.API.CORS.AllowedOrigins), 0)
	check("api.recordings", s.API.Recordings, APIRecordings{Presign: false, PresignTTL: Duration(15 * time.Minute)})
	check("security", s.Security, Security{
		PacketRate: 50, PacketBurst: 200, AuthFailures: 5, AuthWindow: Duration(10 * time.Minute),
		BanDuration: Duration(10 * time.Minute), BanMax: Duration(24 * time.Hour), MaxTracked: 20000,
		TrustLoopback: true, AccountFailures: 10, AccountWindow: Duration(10 * time.Minute), AccountLock: Duration(10 * time.Minute),
	})
	check("webhooks", s.Webhooks, Webhooks{})
	check("roomservice", s.RoomService, (*RoomService)(nil))
	if len(cfg.Trunks)+len(cfg.Tenants)+len(cfg.Accounts)+len(cfg.InboundRoutes)+len(cfg.OutboundRoutes)+len(cfg.InboundOverrides)+len(cfg.Webhooks) != 0 {
		t.Error("a System-only root has no other documents")
	}
}

// TestDefaultsBlocks checks the defaults of blocks and documents that exist only
// when written: a block present with nothing in it gets every default.
func TestDefaultsBlocks(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system(`sip:
  tls:
    certFile: c.pem
    keyFile: k.pem
storage:
  s3:
    bucket: b
    region: r
smtp:
  host: mail.example.com
  from: pbx@example.com
roomservice:
  url: https://rooms.example.com
  apiKey: k
  sipHost: pbx.example.com
`),
		"c.pem": "c", "k.pem": "k",
		"docs.yaml": docs(
			"configVersion: pbx/v1\nkind: Trunk\nmetadata:\n  name: carrier\nspec:\n  host: sip.example\n",
			tenantDoc("acme", "ringGroups:\n  - name: all\n    extensions: [\"100\"]\nmailboxes:\n  - extension: \"100\"\n"),
			"configVersion: pbx/v1\nkind: Account\nmetadata:\n  tenant: acme\n  name: alice\nspec:\n  password: pw\n  extension: \"100\"\n",
		),
	}, nil)
	var problems []string
	for _, p := range rep.Problems {
		problems = append(problems, p.Rule)
	}
	if strings.Join(problems, ",") != "dataDir.required" { // mailboxes need dataDir; nothing else is wrong
		t.Errorf("problems %v, want only dataDir.required", problems)
	}
	s := cfg.System
	if !reflect.DeepEqual(*s.SIP.TLS, TLS{CertFile: "c.pem", KeyFile: "k.pem", MinVersion: "1.2", ReloadEvery: Duration(time.Minute)}) {
		t.Errorf("sip.tls defaults: %+v", *s.SIP.TLS)
	}
	if got := s.Storage.S3.KeyPrefix; got != "{tenant}/recordings/{yyyy}/{mm}/{dd}/{callid}.wav" {
		t.Errorf("keyPrefix default %q", got)
	}
	if sm := s.SMTP; sm.Security != "starttls" || sm.Port != 587 || sm.Timeout.D() != 30*time.Second || sm.MaxAttach != 0 {
		t.Errorf("smtp defaults: %+v", *sm)
	}
	if rs := s.RoomService; rs.SIPPort != 5060 || rs.SIPTransport != "udp" {
		t.Errorf("roomservice defaults: sipPort %d sipTransport %q", rs.SIPPort, rs.SIPTransport)
	}
	tr := cfg.Trunks[0]
	if tr.Port != 5060 || tr.Transport != "udp" || tr.Registration.Expiry.D() != 5*time.Minute || !tr.Inbound.AutoIPs || tr.Registration.Enabled {
		t.Errorf("trunk defaults: %+v", *tr)
	}
	a := cfg.Accounts[0]
	if a.MaxContacts != 5 || a.RingTimeout.D() != 30*time.Second || a.Record != nil {
		t.Errorf("account defaults: maxContacts %d ringTimeout %v record %v", a.MaxContacts, a.RingTimeout, a.Record)
	}
	tn := cfg.Tenants[0]
	if g := tn.RingGroups[0]; g.Strategy != "simultaneous" || g.RingTimeout.D() != 30*time.Second {
		t.Errorf("ring group defaults: %+v", g)
	}
	if tn.FeatureCodes.Voicemail != "*97" {
		t.Errorf("featureCodes.voicemail default %q", tn.FeatureCodes.Voicemail)
	}
	if mb := tn.Mailboxes[0]; mb.MaxMessage != 0 || mb.Attach != nil {
		t.Errorf("mailbox defaults: %+v", mb)
	}
}

func TestSMTPPortBySecurity(t *testing.T) {
	for _, tc := range []struct {
		spec string
		port int
	}{
		{"security: starttls", 587},
		{"security: tls", 465},
		{"security: none", 25},
		{"security: tls\nport: 2465", 2465},
		{"port: 25", 25},
	} {
		t.Run(caseName(tc.spec), func(t *testing.T) {
			cfg, rep := loadFiles(t, map[string]string{
				"system.yaml": system("smtp:\n  host: mail.example.com\n  from: pbx@example.com\n" + indent(tc.spec, "  ")),
			}, nil)
			mustOK(t, rep)
			if cfg.System.SMTP.Port != tc.port {
				t.Errorf("port %d, want %d", cfg.System.SMTP.Port, tc.port)
			}
			if SMTPPort(cfg.System.SMTP.Security) != map[string]int{"starttls": 587, "tls": 465, "none": 25}[cfg.System.SMTP.Security] {
				t.Errorf("SMTPPort(%q) = %d", cfg.System.SMTP.Security, SMTPPort(cfg.System.SMTP.Security))
			}
		})
	}
}

func TestListenerDefaults(t *testing.T) {
	cfg, rep := loadFiles(t, map[string]string{
		"system.yaml": system(`sip:
  bindHost: 192.0.2.1
  bindPort: 5070
  transports:
    - udp
    - tcp
    - transport: tcp
      bindPort: 5080
    - transport: tcp
      id: office
      bindPort: 5090
    - transport: tls
    - transport: wss
    - transport: tls
      bindPort: 5062
      bindHost: 127.0.0.1
  tls:
    certFile: c.pem
    keyFile: k.pem
`),
		"c.pem": "c", "k.pem": "k",
	}, nil)
	mustOK(t, rep)
	type l struct {
		id, host string
		port     int
		srtp     string
		bare     bool
	}
	var got []l
	for _, x := range cfg.System.SIP.Transports {
		got = append(got, l{x.ID, x.BindHost, x.BindPort, x.SRTP, x.Bare})
	}
	want := []l{
		{"udp", "192.0.2.1", 5070, "off", true},
		{"tcp", "192.0.2.1", 5070, "off", true},
		{"tcp-2", "192.0.2.1", 5080, "off", false},
		{"office", "192.0.2.1", 5090, "off", false},
		{"tls", "192.0.2.1", 5061, "off", false},
		{"wss", "192.0.2.1", 443, "off", false},
		{"tls-2", "127.0.0.1", 5062, "off", false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("listeners:\n got %+v\nwant %+v", got, want)
	}
}

// TestListenerIDClash: an explicit id equal to a generated one is refused, not
// silently shadowed.
func TestListenerIDClash(t *testing.T) {
	_, rep := loadFiles(t, map[string]string{
		"system.yaml": system("sip:\n  transports:\n    - transport: tcp\n      id: tcp-2\n      bindPort: 5070\n    - tcp\n    - transport: tcp\n      bindPort: 5080\n"),
	}, nil)
	if len(rep.Problems) != 1 || rep.Problems[0].Rule != "sip.listenerDuplicateId" {
		t.Fatalf("want one sip.listenerDuplicateId, got %v", rep.Problems)
	}
}

func TestUserAgentDefaults(t *testing.T) {
	for _, tc := range []struct {
		spec, ua, contact string
	}{
		{"", "pbx", "pbx"},
		{"sip:\n  userAgent: Acme PBX", "Acme PBX", "Acme PBX"},
		{"sip:\n  userAgent: \"\"", "", ""},
		{"sip:\n  userAgent: \"\"\n  contactUser: office", "", "office"},
		{"sip:\n  contactUser: office", "pbx", "office"},
		{"sip:\n  userAgent: Acme\n  contactUser: \"\"", "Acme", ""},
	} {
		t.Run(caseName(tc.spec), func(t *testing.T) {
			cfg, rep := loadFiles(t, map[string]string{"system.yaml": system(tc.spec)}, nil)
			mustOK(t, rep)
			if ua, cu := *cfg.System.SIP.UserAgent, *cfg.System.SIP.ContactUser; ua != tc.ua || cu != tc.contact {
				t.Errorf("userAgent %q contactUser %q; want %q %q", ua, cu, tc.ua, tc.contact)
			}
		})
	}
}

func TestPacketBurstRaised(t *testing.T) {
	for _, tc := range []struct {
		spec        string
		rate, burst float64
	}{
		{"packetRate: 500", 500, 500},
		{"packetRate: 10\npacketBurst: 20", 10, 20},
		{"packetRate: 100\npacketBurst: 50", 100, 100},
		{"packetBurst: 10", 50, 50},
		{"packetBurst: 300", 50, 300},
	} {
		t.Run(caseName(tc.spec), func(t *testing.T) {
			cfg, rep := loadFiles(t, map[string]string{"system.yaml": system("security:\n" + indent(tc.spec, "  "))}, nil)
			mustOK(t, rep)
			if s := cfg.System.Security; s.PacketRate != tc.rate || s.PacketBurst != tc.burst {
				t.Errorf("rate %v burst %v; want %v %v", s.PacketRate, s.PacketBurst, tc.rate, tc.burst)
			}
		})
	}
}

func TestRateLimitPair(t *testing.T) {
	const api = "api:\n  enabled: true\n  bindPort: 8080\n  tokens:\n    - name: ops\n      hash: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n      scopes: [status:read]\n"
	for _, tc := range []struct {
		spec       string
		rpm, burst float64
		warning    string
	}{
		{"", 300, 60, ""},
		{"rateLimit:\n  burst: 5", 300, 60, "pitfall.burst"},
		{"rateLimit:\n  requestsPerMinute: 100", 100, 60, ""},
		{"rateLimit:\n  requestsPerMinute: 100\n  burst: 5", 100, 5, ""},
		{"rateLimit:\n  requestsPerMinute: -1", -1, 60, "pitfall.rateNegative"},
	} {
		t.Run(caseName(tc.spec), func(t *testing.T) {
			cfg, rep := loadFiles(t, map[string]string{"system.yaml": system(api + indent(tc.spec, "  "))}, nil)
			mustOK(t, rep)
			if r := cfg.System.API.RateLimit; r.RequestsPerMinute != tc.rpm || r.Burst != tc.burst {
				t.Errorf("%+v; want %v/%v", r, tc.rpm, tc.burst)
			}
			var warned []string
			for _, w := range rep.Warnings {
				warned = append(warned, w.Rule)
			}
			if strings.Join(warned, ",") != tc.warning {
				t.Errorf("warnings %v, want %q", warned, tc.warning)
			}
		})
	}
}

// TestDefaultsArePerDocument: defaults are fresh values, never shared between
// documents or loads (a later edit of one must not change another).
func TestDefaultsArePerDocument(t *testing.T) {
	files := map[string]string{"system.yaml": system("")}
	a, _ := loadFiles(t, files, nil)
	b, _ := loadFiles(t, files, nil)
	a.System.Media.Codecs[0] = "changed"
	a.System.SIP.Transports[0].ID = "changed"
	if b.System.Media.Codecs[0] != "alaw" || b.System.SIP.Transports[0].ID != "udp" || DefaultCodecs[0] != "alaw" {
		t.Error("defaults are shared between loads")
	}
}

// caseName names a subtest after the YAML it loads.
func caseName(spec string) string {
	if spec == "" {
		return "default"
	}
	return strings.NewReplacer("\n", "; ", " ", "").Replace(spec)
}
