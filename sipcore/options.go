package sipcore

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
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
	// once when Options.MaxServerTransactions is 0; past it a new request is
	// refused with 503. A transaction stays open while it is handled and then
	// CompletedLinger to absorb retransmissions, so the cap admits about
	// cap / CompletedLinger new transactions a second (40,000: 20,000
	// REGISTERs with their challenges) and bounds their memory (about 6 kB
	// each) near 1.2 GB whatever the flood.
	DefaultMaxServerTransactions = 200000
	// CompletedLinger is how long a transaction outlives its final
	// response over UDP, where RFC 3261 and RFC 6026 say 64*T1 (32 s): a
	// non-INVITE server transaction (Timer J), an INVITE server transaction
	// after its 2xx (Timer L) and an INVITE client transaction after a 2xx
	// (Timer M). Kamailio's transactions wait 5 s (tm's wt_timer) too.
	// A client whose response was lost retransmits at most T2 (4 s) apart,
	// so 5 s still absorbs the usual retransmission; one arriving later is
	// handled as a new request, which for a REGISTER, an OPTIONS or a
	// challenged request is what Kamailio's stateless replies do anyway.
	// After an INVITE's 2xx the UA cores take over what the transactions
	// did for the rest of 64*T1: the 2xx is retransmitted until the ACK
	// through the transport once the transaction is gone (serverTx), a
	// retransmitted 2xx from a callee is ACKed from its dialog (the
	// b2bua's unhandled-response hook), and a late retransmission of an
	// answered INVITE is absorbed by its call (b2bua). Every answered call
	// kept its caller's INVITE, the callee's INVITE and both 200s, parsed,
	// for 32 s: at 1,200 calls a second (BenchmarkSIPpCallSetup, records
	// on, 1 s calls, six 10 s steps) the live heap was 530-590 MB and each
	// collection marked for 1.6-2 s, during which setup p99 rose from under
	// 100 ms to under 1 s and some calls failed; with 5 s the live heap is
	// about 230 MB, a mark 0.6 s, and every step kept p99 under 100 ms.
	CompletedLinger = 5 * time.Second
	// RetryAfterOverload is the Retry-After, in seconds, of the 503 sent to a
	// request refused past the transaction cap.
	RetryAfterOverload = 10

	// DefaultTCPIdleTimeout closes a SIP TCP connection that carried no byte
	// for this long. It is longer than the CRLF keep-alive (RFC 5626 4.4.1
	// suggests 95-120 s) and the registration refresh phones use over TCP.
	DefaultTCPIdleTimeout = 10 * time.Minute
	// DefaultTCPMessageTimeout closes a SIP TCP connection whose message
	// started arriving and is still incomplete this long after its first
	// byte (a header section without its blank line, or a body shorter than
	// Content-Length). A phone sends a whole message in one go; only a
	// stalled or hostile peer takes seconds.
	DefaultTCPMessageTimeout = 10 * time.Second
	// DefaultTCPMaxConnections caps the SIP TCP connections open at once,
	// over every TCP listener.
	DefaultTCPMaxConnections = 4096
	// DefaultTCPMaxPerSource caps the SIP TCP connections from one source IP
	// address: enough for an office of phones behind one NAT address.
	DefaultTCPMaxPerSource = 64
	// TCPMaxMessage is the largest SIP message accepted over TCP, header
	// section and body together. It equals the limit of sipgo's parser
	// (sip.ParseMaxMessageLength); a peer that announces or sends more has
	// its connection closed at once.
	TCPMaxMessage = 65535
	// TCPWriteTimeout bounds one write to a SIP TCP connection, so a peer
	// that stops reading cannot hold the goroutine sending to it.
	TCPWriteTimeout = 10 * time.Second
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
// called for every UDP datagram and, on a connection accepted by a TCP
// listener, once per complete SIP message (CRLF keep-alives are not
// messages), on the socket's read goroutine: it must be quick and must not
// block. Returning false drops a datagram silently and closes a TCP
// connection at that message boundary.
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

	// TCP bounds the connections TCP listeners accept.
	TCP TCPOptions
}

// TCPOptions bounds SIP over TCP. A zero field takes its default.
type TCPOptions struct {
	// IdleTimeout closes a connection with no byte received for this long
	// (DefaultTCPIdleTimeout).
	IdleTimeout time.Duration
	// MessageTimeout closes a connection whose message is incomplete this
	// long after its first byte (DefaultTCPMessageTimeout).
	MessageTimeout time.Duration
	// MaxConnections caps the accepted connections open at once over every
	// TCP listener (DefaultTCPMaxConnections).
	MaxConnections int
	// MaxPerSource caps the accepted connections open at once from one
	// source IPv4 address or IPv6 /64 (DefaultTCPMaxPerSource).
	MaxPerSource int
}

// withDefaults fills zero fields.
func (o TCPOptions) withDefaults() TCPOptions {
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultTCPIdleTimeout
	}
	if o.MessageTimeout == 0 {
		o.MessageTimeout = DefaultTCPMessageTimeout
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultTCPMaxConnections
	}
	if o.MaxPerSource == 0 {
		o.MaxPerSource = min(DefaultTCPMaxPerSource, o.MaxConnections)
	}
	return o
}

// validate refuses negative values and a per-source cap above the total.
func (o TCPOptions) validate() error {
	if o.IdleTimeout < 0 || o.MessageTimeout < 0 || o.MaxConnections < 0 || o.MaxPerSource < 0 {
		return fmt.Errorf("%w: negative tcp limit", ErrInvalidOptions)
	}
	if o.MaxPerSource > o.MaxConnections {
		return fmt.Errorf("%w: tcp maxPerSource %d above maxConnections %d", ErrInvalidOptions, o.MaxPerSource, o.MaxConnections)
	}
	return nil
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
