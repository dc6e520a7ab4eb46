package sipcore

import (
	"net/netip"
	"strings"
)

// Defaults applied by New.
const (
	// DefaultUserAgent is the product token of User-Agent and Server headers.
	DefaultUserAgent = "pbx"
	// DefaultBindHost is the bind address of a listener that names none.
	DefaultBindHost = "0.0.0.0"
	// DefaultPort is the bind port of a udp or tcp listener that names none
	// and is not explicitly ephemeral.
	DefaultPort = 5060
	// UDPMaxMessage is the largest SIP message sent over UDP. sipgo refuses
	// messages above sip.UDPMTUSize-200; New raises sip.UDPMTUSize so that
	// this many bytes fit.
	UDPMaxMessage = 8000
	// UDPSocketBuffer is the receive and send buffer asked for on UDP
	// listeners (the kernel grants at most net.core.rmem_max/wmem_max).
	UDPSocketBuffer = 4 << 20
	// DefaultMaxServerTransactions caps the server transactions open at
	// once when Options.MaxServerTransactions is 0. A UDP non-INVITE server
	// transaction lives 64*T1 = 32 s after its final response (RFC 3261
	// 17.2.2) and holds about 6 kB, so the cap bounds that memory near
	// 120 MB; past it a new request is refused with 503.
	DefaultMaxServerTransactions = 20000
	// RetryAfterOverload is the Retry-After, in seconds, of the 503 sent to a
	// request refused past the transaction cap.
	RetryAfterOverload = 10
)

// Transport names a listener's protocol as written in the configuration.
const (
	TransportUDP = "udp"
	TransportTCP = "tcp"
	TransportTLS = "tls"
	TransportWSS = "wss"
)

// Listener is one SIP socket.
type Listener struct {
	ID        string // unique name, used in errors and to pin legs to a socket
	Transport string // "udp", "tcp"; "tls" and "wss" are refused
	BindHost  string // empty means DefaultBindHost
	BindPort  int    // 0 binds an ephemeral port; read it back with Server.Addr
}

// Admitter decides whether a packet from src reaches the SIP stack. It is
// called for every UDP datagram and every TCP read chunk before parsing, on
// the socket's read goroutine: it must be quick and must not block. Returning
// false drops the packet silently.
type Admitter func(src netip.AddrPort, transport string, packet []byte) bool

// Options configures a Server.
type Options struct {
	// Listeners to bind. At least one is required.
	Listeners []Listener

	// UserAgent is the product token put in User-Agent on requests and in
	// Server on responses. nil means DefaultUserAgent; a pointer to "" removes
	// both headers.
	UserAgent *string

	// ContactUser is the user part of the PBX's Contact. Empty means the
	// user agent token.
	ContactUser string

	// ExternalHost is the host advertised in Via and Contact (and usable for
	// SDP) behind NAT. Empty means the bind host, or when that is a wildcard
	// address, the first non-loopback interface address (loopback as last
	// resort).
	ExternalHost string

	// Admit, when set, sees every packet before the SIP stack.
	Admit Admitter

	// MaxServerTransactions caps the server transactions open at once; a
	// new request past the cap is answered 503 with Retry-After without
	// creating one, unless its source recently got a 2xx (a phone that
	// authenticated), which may use a reserve of a quarter of the cap more
	// (the count lags a flood by the requests in flight, so the reserve is
	// generous).
	// 0 means DefaultMaxServerTransactions.
	MaxServerTransactions int
}

// StringPtr returns a pointer to s; handy for Options.UserAgent.
func StringPtr(s string) *string { return &s }

func (o Options) userAgent() string {
	if o.UserAgent == nil {
		return DefaultUserAgent
	}
	return *o.UserAgent
}

func (o Options) maxServerTransactions() int {
	if o.MaxServerTransactions > 0 {
		return o.MaxServerTransactions
	}
	return DefaultMaxServerTransactions
}

func (o Options) contactUser() string {
	if o.ContactUser != "" {
		return o.ContactUser
	}
	return o.userAgent()
}

func normalTransport(t string) string { return strings.ToLower(strings.TrimSpace(t)) }
