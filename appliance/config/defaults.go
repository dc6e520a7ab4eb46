package config

import (
	"fmt"
	"time"
)

// Defaults from the specification.
const (
	DefaultSIPBindHost     = "0.0.0.0"
	DefaultSIPPort         = 5060
	DefaultTLSPort         = 5061
	DefaultWSSPort         = 443
	DefaultUserAgent       = "pbx"
	DefaultAPIBindHost     = "127.0.0.1"
	DefaultRequestsPerMin  = 300
	DefaultBurst           = 60
	DefaultPresignTTL      = 15 * time.Minute
	DefaultTLSReload       = time.Minute
	DefaultTLSMinVersion   = "1.2"
	DefaultMaxMessage      = 3 * time.Minute
	DefaultSMTPTimeout     = 30 * time.Second
	DefaultSMTPSecurity    = "starttls"
	DefaultPacketRate      = 50
	DefaultPacketBurst     = 200
	DefaultAuthFailures    = 5
	DefaultAuthWindow      = 10 * time.Minute
	DefaultBanDuration     = 10 * time.Minute
	DefaultBanMax          = 24 * time.Hour
	DefaultMaxTracked      = 20000
	DefaultAccountFailures = 10
	DefaultAccountWindow   = 10 * time.Minute
	DefaultAccountLock     = 10 * time.Minute
	DefaultTrunkExpiry     = 5 * time.Minute
	DefaultMaxContacts     = 5
	DefaultRingTimeout     = 30 * time.Second
	DefaultKeyPrefix       = "{tenant}/recordings/{yyyy}/{mm}/{dd}/{callid}.wav"
	DefaultRoomServicePort = 5060
	DefaultVoicemailCode   = "*97"
	// DefaultVoicemailOtherCode asks for a mailbox number and its PIN.
	DefaultVoicemailOtherCode = "*98"
	// DefaultMaxMessages is a mailbox's quota.
	DefaultMaxMessages  = 100
	DefaultMediaTimeout = 60 * time.Second
	// DefaultPortQuarantine rests a released RTP port briefly: with the
	// default 10000-20000 range, 2,000 one-second calls a second fit.
	DefaultPortQuarantine = 200 * time.Millisecond
	// DefaultRelayPriority wakes the RTP relay ahead of the host's other
	// programs, as Asterisk's -p and FreeSWITCH's -rp do for their media.
	DefaultRelayPriority = "realtime"
	// sip.tcp: longer than phones' CRLF keep-alive and TCP registration
	// refresh; caps well below the unit's LimitNOFILE (65536).
	DefaultTCPIdleTimeout    = 10 * time.Minute
	DefaultTCPMaxConnections = 4096
	DefaultTCPMaxPerSource   = 64 // an office of phones behind one NAT address
)

// DefaultDigestAlgorithms is the default sip.digestAlgorithms: MD5 alone, as
// Asterisk and Kamailio challenge (some stock clients give up on a second
// challenge header).
var DefaultDigestAlgorithms = []string{"md5"}

// DefaultCodecs is the default media.codecs.
var DefaultCodecs = []string{"alaw", "ulaw"}

func (s *System) setDefaults() {
	s.SIP = SIP{BindHost: DefaultSIPBindHost, BindPort: DefaultSIPPort, Transports: []Listener{{Transport: "udp", Bare: true}},
		TCP:              SIPTCP{IdleTimeout: Duration(DefaultTCPIdleTimeout), MaxConnections: DefaultTCPMaxConnections, MaxPerSource: DefaultTCPMaxPerSource},
		DigestAlgorithms: append([]string(nil), DefaultDigestAlgorithms...)}
	s.Media = Media{Codecs: append([]string(nil), DefaultCodecs...), Timeout: Duration(DefaultMediaTimeout), PortQuarantine: Duration(DefaultPortQuarantine),
		RelayPriority: DefaultRelayPriority}
	s.Recording.setDefaults()
	s.Voicemail = Voicemail{MaxMessage: Duration(DefaultMaxMessage), MWI: true}
	s.API = API{
		BindHost:   DefaultAPIBindHost,
		RateLimit:  RateLimit{RequestsPerMinute: DefaultRequestsPerMin, Burst: DefaultBurst},
		Recordings: APIRecordings{PresignTTL: Duration(DefaultPresignTTL)},
	}
	s.Security = Security{
		PacketRate:    DefaultPacketRate,
		PacketBurst:   DefaultPacketBurst,
		AuthFailures:  DefaultAuthFailures,
		AuthWindow:    Duration(DefaultAuthWindow),
		BanDuration:   Duration(DefaultBanDuration),
		BanMax:        Duration(DefaultBanMax),
		MaxTracked:    DefaultMaxTracked,
		TrustLoopback: true,

		AccountFailures: DefaultAccountFailures,
		AccountWindow:   Duration(DefaultAccountWindow),
		AccountLock:     Duration(DefaultAccountLock),
	}
}

func (r *Recording) setDefaults() {
	*r = Recording{Mode: "none", Storage: "local", KeepLocal: true}
}

func (t *TLS) setDefaults() {
	*t = TLS{MinVersion: DefaultTLSMinVersion, ReloadEvery: Duration(DefaultTLSReload)}
}

func (s *SMTP) setDefaults() {
	*s = SMTP{Security: DefaultSMTPSecurity, Timeout: Duration(DefaultSMTPTimeout)}
}

func (s *S3) setDefaults() {
	*s = S3{KeyPrefix: DefaultKeyPrefix}
}

func (r *RoomService) setDefaults() {
	*r = RoomService{SIPPort: DefaultRoomServicePort, SIPTransport: "udp"}
}

func (t *Trunk) setDefaults() {
	t.Port = DefaultSIPPort
	t.Transport = "udp"
	t.Registration.Expiry = Duration(DefaultTrunkExpiry)
	t.Inbound.AutoIPs = true
}

func (a *Account) setDefaults() {
	a.MaxContacts = DefaultMaxContacts
	a.RingTimeout = Duration(DefaultRingTimeout)
}

func (g *RingGroup) setDefaults() {
	g.Strategy = StrategySimultaneous
	g.RingTimeout = Duration(DefaultRingTimeout)
}

func (m *Mailbox) setDefaults() {}

// SMTPPort is the default port for an SMTP security mode.
func SMTPPort(security string) int {
	switch security {
	case "tls":
		return 465
	case "none":
		return 25
	}
	return 587
}

// complete fills the defaults that depend on other fields.
func (c *Config) complete() {
	s := &c.System
	if s.SIP.UserAgent == nil {
		ua := DefaultUserAgent
		s.SIP.UserAgent = &ua
	}
	if s.SIP.ContactUser == nil {
		cu := *s.SIP.UserAgent
		s.SIP.ContactUser = &cu
	}
	count := map[string]int{}
	for i := range s.SIP.Transports {
		l := &s.SIP.Transports[i]
		count[l.Transport]++
		if l.ID == "" {
			l.ID = l.Transport
			if n := count[l.Transport]; n > 1 {
				l.ID = fmt.Sprintf("%s-%d", l.Transport, n)
			}
		}
		if l.BindHost == "" {
			l.BindHost = s.SIP.BindHost
		}
		if l.BindPort == 0 {
			switch l.Transport {
			case "tls":
				l.BindPort = DefaultTLSPort
			case "wss":
				l.BindPort = DefaultWSSPort
			default:
				l.BindPort = s.SIP.BindPort
			}
		}
		if l.SRTP == "" {
			l.SRTP = "off"
		}
	}
	if s.Security.PacketBurst < s.Security.PacketRate {
		s.Security.PacketBurst = s.Security.PacketRate
	}
	if s.SMTP != nil && s.SMTP.Port == 0 {
		s.SMTP.Port = SMTPPort(s.SMTP.Security)
	}
	if s.Has("api.rateLimit.burst") && !s.Has("api.rateLimit.requestsPerMinute") {
		// burst alone is ignored: the default pair stays.
		s.API.RateLimit.Burst = DefaultBurst
	}
	for _, t := range c.Tenants {
		if t.FeatureCodes.Voicemail == "" {
			t.FeatureCodes.Voicemail = DefaultVoicemailCode
		}
		if t.FeatureCodes.VoicemailOther == "" {
			t.FeatureCodes.VoicemailOther = DefaultVoicemailOtherCode
		}
		for i := range t.Mailboxes {
			if t.Mailboxes[i].MaxMessages == 0 {
				t.Mailboxes[i].MaxMessages = DefaultMaxMessages
			}
		}
	}
}
