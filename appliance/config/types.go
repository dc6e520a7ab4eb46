package config

// Document kinds.
const (
	KindSystem          = "System"
	KindTrunk           = "Trunk"
	KindInboundOverride = "InboundOverride"
	KindOutboundRoute   = "OutboundRoute"
	KindTenant          = "Tenant"
	KindAccount         = "Account"
	KindInboundRoute    = "InboundRoute"
	KindWebhook         = "Webhook"
)

// Version is the only accepted configVersion.
const Version = "pbx/v1"

// Meta says where a document came from.
type Meta struct {
	Kind   string
	File   string // relative to the configuration root, slash-separated
	Line   int    // line of the document's first key
	Name   string // metadata.name
	Tenant string // metadata.tenant

	lines map[string]int // field path -> line, for every key present
}

// Has reports whether the document spelled out the field at path
// ("smtp.host", "api.tokens[0].scopes"), as opposed to leaving it to a default.
func (m *Meta) Has(path string) bool {
	_, ok := m.lines[path]
	return ok
}

// LineOf returns the line of the field at path, or of its nearest present parent,
// or of the document itself.
func (m *Meta) LineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := m.lines[p]; ok {
			return l
		}
	}
	return m.Line
}

// Config is every document of a configuration root after defaults.
type Config struct {
	Root string

	System           System
	Trunks           []*Trunk
	InboundOverrides []*InboundOverride
	OutboundRoutes   []*OutboundRoute
	Tenants          []*Tenant
	Accounts         []*Account
	InboundRoutes    []*InboundRoute
	Webhooks         []*Webhook
}

// System is the singleton System document.
type System struct {
	Meta `yaml:"-"`

	SIP              SIP          `yaml:"sip"`
	Media            Media        `yaml:"media"`
	MOH              *MOH         `yaml:"moh"`
	DefaultTrunk     string       `yaml:"defaultTrunk"`
	Timezone         string       `yaml:"timezone"`
	AllowInterTenant bool         `yaml:"allowInterTenant"`
	DataDir          string       `yaml:"dataDir"`
	CDR              CDR          `yaml:"cdr"`
	Recording        Recording    `yaml:"recording"`
	Storage          *Storage     `yaml:"storage"`
	Voicemail        Voicemail    `yaml:"voicemail"`
	SMTP             *SMTP        `yaml:"smtp"`
	TTS              *TTS         `yaml:"tts"`
	API              API          `yaml:"api"`
	Security         Security     `yaml:"security"`
	Webhooks         Webhooks     `yaml:"webhooks"`
	RoomService      *RoomService `yaml:"roomservice"`
	LiveKit          *RoomService `yaml:"livekit,omitempty"` // deprecated spelling of roomservice; never printed
}

// SIP is the sip block.
type SIP struct {
	BindHost     string     `yaml:"bindHost"`
	BindPort     int        `yaml:"bindPort"`
	Transports   []Listener `yaml:"transports"`
	ExternalHost string     `yaml:"externalHost"`
	UserAgent    *string    `yaml:"userAgent"`
	ContactUser  *string    `yaml:"contactUser"`
	TLS          *TLS       `yaml:"tls"`
	// DigestAlgorithms are the digest algorithms the 401/407 challenges
	// offer, one header each, in this order: md5, sha-256.
	DigestAlgorithms []string `yaml:"digestAlgorithms"`
	TCP              SIPTCP   `yaml:"tcp"`
}

// SIPTCP is sip.tcp: the bounds of SIP over TCP connections.
type SIPTCP struct {
	IdleTimeout    Duration `yaml:"idleTimeout"`    // close a connection silent this long
	MaxConnections int      `yaml:"maxConnections"` // open at once over every tcp listener
	MaxPerSource   int      `yaml:"maxPerSource"`   // open at once from one IPv4 address or IPv6 /64
}

// Listener is one entry of sip.transports: a bare protocol name or a mapping.
type Listener struct {
	Transport string `yaml:"transport"`
	ID        string `yaml:"id"`
	BindHost  string `yaml:"bindHost"`
	BindPort  int    `yaml:"bindPort"`
	SRTP      string `yaml:"srtp"`

	// Bare is true when the entry was written as a bare string.
	Bare bool `yaml:"-"`
}

// TLS is the shape of sip.tls and api.tls.
type TLS struct {
	CertFile     string        `yaml:"certFile"`
	KeyFile      string        `yaml:"keyFile"`
	Certificates []Certificate `yaml:"certificates"`
	ClientCAFile string        `yaml:"clientCaFile"`
	MinVersion   string        `yaml:"minVersion"`
	ReloadEvery  Duration      `yaml:"reloadEvery"`
}

// Certificate is one certificate and key pair.
type Certificate struct {
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
}

// Media is the media block.
type Media struct {
	Codecs      []string `yaml:"codecs"`
	RTPPortMin  int      `yaml:"rtpPortMin,omitempty"` // 0: the media library's default
	RTPPortMax  int      `yaml:"rtpPortMax,omitempty"`
	ExternalIP  string   `yaml:"externalIp"`
	SAVPProfile string   `yaml:"savpProfile"`
	// Timeout ends a call whose RTP stopped in both directions this long; zero
	// disables it. Not in the specification's table: a pbx extension.
	Timeout Duration `yaml:"timeout"`
	// PortQuarantine is how long a released RTP port rests before another
	// call may take it; zero: none. Not in the specification's table: a pbx
	// extension.
	PortQuarantine Duration `yaml:"portQuarantine"`
	// RelayPriority schedules the RTP relay's threads against the host's
	// other programs: normal, high (nice -10) or realtime (SCHED_FIFO,
	// falling back to high, then normal, where the host refuses it). Not
	// in the specification's table: a pbx extension.
	RelayPriority string `yaml:"relayPriority"`
	// KernelForwarding moves each settled direction of a call's media
	// (latched, not recorded, no music or prompt playing into it) into
	// the kernel: a tc program rewrites its datagrams toward the other
	// far end, so the relay reads and sends none of them, as rtpengine's
	// kernel module does. It needs CAP_BPF and CAP_NET_ADMIN; without
	// them the relay logs why and forwards every packet itself. Not in
	// the specification's table: a pbx extension.
	KernelForwarding bool `yaml:"kernelForwarding"`
}

// MOH is a music-on-hold block (System or Tenant).
type MOH struct {
	Default string            `yaml:"default"`
	Classes map[string]string `yaml:"classes"`
}

// CDR is the call-log block.
type CDR struct {
	Enabled   bool     `yaml:"enabled"`
	Retention Duration `yaml:"retention"`
}

// Recording is the recording block (System; a Tenant override takes only Enabled and Mode).
type Recording struct {
	Enabled    bool     `yaml:"enabled"`
	Mode       string   `yaml:"mode"`
	Storage    string   `yaml:"storage"`
	KeepLocal  bool     `yaml:"keepLocal"`
	MaxPending int      `yaml:"maxPending"`
	Retention  Duration `yaml:"retention"`
	Beep       bool     `yaml:"beep"`
}

// Storage is the object-storage block.
type Storage struct {
	S3 *S3 `yaml:"s3"`
}

// S3 is storage.s3.
type S3 struct {
	Bucket          string   `yaml:"bucket"`
	Region          string   `yaml:"region"`
	Endpoint        string   `yaml:"endpoint"`
	PathStyle       bool     `yaml:"pathStyle"`
	AccessKeyID     string   `yaml:"accessKeyId"`
	SecretAccessKey Secret   `yaml:"secretAccessKey"`
	SessionToken    Secret   `yaml:"sessionToken"`
	KeyPrefix       string   `yaml:"keyPrefix"`
	SSE             string   `yaml:"sse"`
	KMSKeyID        string   `yaml:"kmsKeyId"`
	StorageClass    string   `yaml:"storageClass"`
	Timeout         Duration `yaml:"timeout"`
	MaxRetryAge     Duration `yaml:"maxRetryAge"`
}

// Voicemail is the voicemail block.
type Voicemail struct {
	Enabled        bool     `yaml:"enabled"`
	MaxMessage     Duration `yaml:"maxMessage"`
	MinMessage     Duration `yaml:"minMessage"`
	SilenceTimeout Duration `yaml:"silenceTimeout"`
	Retention      Duration `yaml:"retention"`
	PromptsDir     string   `yaml:"promptsDir"`
	MWI            bool     `yaml:"mwi"`
}

// SMTP is the relay for voicemail notices (System; a Tenant override merges field by field).
type SMTP struct {
	Host               string   `yaml:"host"`
	Port               int      `yaml:"port"`
	Security           string   `yaml:"security"`
	Username           string   `yaml:"username"`
	Password           Secret   `yaml:"password"`
	From               string   `yaml:"from"`
	Timeout            Duration `yaml:"timeout"`
	MaxAttach          Duration `yaml:"maxAttach"`
	Subject            string   `yaml:"subject"`
	Body               string   `yaml:"body"`
	HELO               string   `yaml:"helo"`
	InsecureSkipVerify bool     `yaml:"insecureSkipVerify"`
}

// TTS is the prompt-generation block.
type TTS struct {
	Provider   string `yaml:"provider"`
	APIKey     Secret `yaml:"apiKey"`
	APIKeyFile string `yaml:"apiKeyFile"`
	Voice      string `yaml:"voice"`
	Model      string `yaml:"model"`

	// Key is the effective key after precedence (PBX_TTS_API_KEY, apiKeyFile, apiKey).
	Key Secret `yaml:"-"`
}

// API is the management API block.
type API struct {
	Enabled    bool          `yaml:"enabled"`
	BindHost   string        `yaml:"bindHost"`
	BindPort   int           `yaml:"bindPort"`
	TLS        *TLS          `yaml:"tls"`
	RateLimit  RateLimit     `yaml:"rateLimit"`
	CORS       CORS          `yaml:"cors"`
	Recordings APIRecordings `yaml:"recordings"`
	Tokens     []Token       `yaml:"tokens"`
}

// RateLimit is api.rateLimit.
type RateLimit struct {
	RequestsPerMinute float64 `yaml:"requestsPerMinute"`
	Burst             float64 `yaml:"burst"`
}

// CORS is api.cors.
type CORS struct {
	AllowedOrigins []string `yaml:"allowedOrigins"`
}

// APIRecordings is api.recordings.
type APIRecordings struct {
	Presign    bool     `yaml:"presign"`
	PresignTTL Duration `yaml:"presignTtl"`
}

// Token is one api.tokens entry.
type Token struct {
	Name    string   `yaml:"name"`
	Token   Secret   `yaml:"token"`
	Hash    string   `yaml:"hash"`
	Scopes  []string `yaml:"scopes"`
	Tenants []string `yaml:"tenants"`
	Expires string   `yaml:"expires"`
}

// Security is the security guard block.
type Security struct {
	Enabled       bool     `yaml:"enabled"`
	PacketRate    float64  `yaml:"packetRate"`
	PacketBurst   float64  `yaml:"packetBurst"`
	AuthFailures  int      `yaml:"authFailures"`
	AuthWindow    Duration `yaml:"authWindow"`
	BanDuration   Duration `yaml:"banDuration"`
	BanMax        Duration `yaml:"banMax"`
	MaxTracked    int      `yaml:"maxTracked"`
	MaxDatagram   int      `yaml:"maxDatagram"`
	TrustLoopback bool     `yaml:"trustLoopback"`
	Allow         []string `yaml:"allow"`
	Deny          []string `yaml:"deny"`
	ACL           ACL      `yaml:"acl"`
	RequireSRTP   bool     `yaml:"requireSrtp"`
	Limits        Limits   `yaml:"limits"`

	// AccountFailures authentication failures for one account, from any
	// sources, within AccountWindow lock it for AccountLock after the last
	// (0 never locks).
	AccountFailures int      `yaml:"accountFailures"`
	AccountWindow   Duration `yaml:"accountWindow"`
	AccountLock     Duration `yaml:"accountLock"`
}

// ACL is security.acl (validated, never read).
type ACL struct {
	Register AllowDeny `yaml:"register"`
	Invite   AllowDeny `yaml:"invite"`
}

// AllowDeny is a pair of prefix lists.
type AllowDeny struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
}

// Limits is security.limits (and a tenant's limits override). Zero means no limit.
type Limits struct {
	MaxConcurrentCalls      int      `yaml:"maxConcurrentCalls"`
	MaxConcurrentPerAccount int      `yaml:"maxConcurrentPerAccount"`
	MaxOutboundPerMinute    float64  `yaml:"maxOutboundPerMinute"`
	BlockedPrefixes         []string `yaml:"blockedPrefixes"`
	OutboundMinutesPerHour  int      `yaml:"outboundMinutesPerHour"`
	OutboundMinutesPerMonth int      `yaml:"outboundMinutesPerMonth"`
}

// Webhooks holds the global webhook delivery defaults.
type Webhooks struct {
	Timeout       Duration `yaml:"timeout"`
	MaxAttemptAge Duration `yaml:"maxAttemptAge"`
	Concurrency   int      `yaml:"concurrency"`
}

// RoomService is the room service deployment mobile apps join.
type RoomService struct {
	URL             string   `yaml:"url"`
	APIKey          string   `yaml:"apiKey"`
	APISecret       Secret   `yaml:"apiSecret"`
	APISecretFile   string   `yaml:"apiSecretFile"`
	SIPHost         string   `yaml:"sipHost"`
	SIPPort         int      `yaml:"sipPort"`
	SIPTransport    string   `yaml:"sipTransport"`
	TransportID     string   `yaml:"transportId"`
	Auth            Auth     `yaml:"auth"`
	MatchIPs        []string `yaml:"matchIps"`
	RoomPrefix      string   `yaml:"roomPrefix"`
	OutboundTrunkID string   `yaml:"outboundTrunkId"`

	// Secret is the effective API secret after precedence
	// (PBX_ROOMSERVICE_API_SECRET, apiSecretFile, apiSecret).
	Secret Secret `yaml:"-"`
}

// Auth is a username and password pair.
type Auth struct {
	Username string `yaml:"username"`
	Password Secret `yaml:"password"`
}

// CallerID is a number and display name.
type CallerID struct {
	Number string `yaml:"number"`
	Name   string `yaml:"name"`
}

// Trunk is a carrier trunk document.
type Trunk struct {
	Meta `yaml:"-"`

	Host         string       `yaml:"host"`
	Tenant       string       `yaml:"tenant"`
	Port         int          `yaml:"port"`
	Transport    string       `yaml:"transport"`
	TransportID  string       `yaml:"transportId"`
	Auth         Auth         `yaml:"auth"`
	Registration Registration `yaml:"registration"`
	Inbound      TrunkInbound `yaml:"inbound"`
	CallerID     CallerID     `yaml:"callerId"`
}

// Registration is a trunk's outbound registration.
type Registration struct {
	Enabled     bool     `yaml:"enabled"`
	Expiry      Duration `yaml:"expiry"`
	ContactUser string   `yaml:"contactUser"`
}

// TrunkInbound says which source addresses a trunk's calls come from.
type TrunkInbound struct {
	MatchIPs []string `yaml:"matchIps"`
	AutoIPs  bool     `yaml:"autoIps"`
}

// Destination is where a routed call goes.
type Destination struct {
	Type   string `yaml:"type"`
	Target string `yaml:"target"`
}

// Destination types.
const (
	DestExtension = "extension"
	DestRingGroup = "ring_group"
	DestQueue     = "queue"
	DestIVR       = "ivr"
	DestVoicemail = "voicemail"
	DestExternal  = "external"
	DestHangup    = "hangup"
)

// InboundOverride redirects a number regardless of which tenant claims it.
type InboundOverride struct {
	Meta `yaml:"-"`

	Priority    int          `yaml:"priority"`
	DID         string       `yaml:"did"`
	Tenant      string       `yaml:"tenant"`
	Destination *Destination `yaml:"destination"`
}

// OutboundRoute is a tenant's route (metadata.tenant set) or a global fallback.
type OutboundRoute struct {
	Meta `yaml:"-"`

	Priority int    `yaml:"priority"`
	Pattern  string `yaml:"pattern"`
	Strip    int    `yaml:"strip"`
	Prepend  string `yaml:"prepend"`
	Trunk    string `yaml:"trunk"`
}

// Tenant is a tenant document; metadata.name is the tenant id.
type Tenant struct {
	Meta `yaml:"-"`

	Domain           string       `yaml:"domain"`
	Timezone         string       `yaml:"timezone"`
	CallerID         CallerID     `yaml:"callerId"`
	AllowInterTenant bool         `yaml:"allowInterTenant"`
	Recording        *Recording   `yaml:"recording"`
	RoomService      *RoomService `yaml:"roomservice"`
	LiveKit          *RoomService `yaml:"livekit,omitempty"` // deprecated spelling of roomservice; never printed
	Storage          *Storage     `yaml:"storage"`
	SMTP             *SMTP        `yaml:"smtp"`
	MOH              *MOH         `yaml:"moh"`
	Limits           *Limits      `yaml:"limits"`
	RingGroups       []RingGroup  `yaml:"ringGroups"`
	Mailboxes        []Mailbox    `yaml:"mailboxes"`
	FeatureCodes     FeatureCodes `yaml:"featureCodes"`
}

// RingGroup rings several extensions.
type RingGroup struct {
	Name        string   `yaml:"name"`
	Extensions  []string `yaml:"extensions"`
	Strategy    string   `yaml:"strategy"`
	RingTimeout Duration `yaml:"ringTimeout"`
}

// Ring group strategies.
const (
	StrategySimultaneous = "simultaneous"
	StrategySequential   = "sequential"
)

// Mailbox is a voicemail box of an extension.
type Mailbox struct {
	Extension  string   `yaml:"extension"`
	PIN        Secret   `yaml:"pin"`
	Email      string   `yaml:"email"`
	MaxMessage Duration `yaml:"maxMessage"`
	// MaxMessages is the mailbox's quota (default 100): a full mailbox
	// says so and takes nothing.
	MaxMessages int   `yaml:"maxMessages"`
	Attach      *bool `yaml:"attach"`
}

// FeatureCodes are the codes an account dials for PBX features.
type FeatureCodes struct {
	Voicemail      string `yaml:"voicemail"`      // own mailbox (default *97)
	VoicemailOther string `yaml:"voicemailOther"` // asks for a mailbox and its PIN (default *98)
}

// Account is a SIP account; metadata.name is the SIP username.
type Account struct {
	Meta `yaml:"-"`

	Password    Secret   `yaml:"password"`
	Extension   string   `yaml:"extension"`
	Record      *bool    `yaml:"record"`
	DisplayName string   `yaml:"displayName"`
	CallerID    CallerID `yaml:"callerId"`
	MaxContacts int      `yaml:"maxContacts"`
	RingTimeout Duration `yaml:"ringTimeout"`
	Voicemail   *bool    `yaml:"voicemail"`
	// MOHClass is the music-on-hold class the account's callers hear
	// when it holds them (default: the tenant's default class).
	MOHClass string `yaml:"mohClass"`
}

// InboundRoute routes a tenant's number.
type InboundRoute struct {
	Meta `yaml:"-"`

	Priority    int         `yaml:"priority"`
	DID         string      `yaml:"did"`
	Destination Destination `yaml:"destination"`
	Record      *bool       `yaml:"record"`
	// MOHClass is the music-on-hold class for calls to this number.
	MOHClass string `yaml:"mohClass"`
}

// Webhook is a tenant's webhook endpoint.
type Webhook struct {
	Meta `yaml:"-"`

	URL        string   `yaml:"url"`
	Events     []string `yaml:"events"`
	Secret     Secret   `yaml:"secret"`
	SecretFile string   `yaml:"secretFile"`
	Timeout    Duration `yaml:"timeout"`

	// Key is the effective signing secret (secretFile, else secret).
	Key Secret `yaml:"-"`
}
