package registrar

import (
	"net/netip"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"
)

// Binding is one registered contact of an account.
type Binding struct {
	Tenant    string `json:"tenant"`
	Username  string `json:"username"`
	Extension string `json:"extension"`
	Domain    string `json:"domain"`

	Contact    string `json:"contact"`            // Contact URI as registered
	InstanceID string `json:"instance,omitempty"` // +sip.instance, if any
	Q          string `json:"q,omitempty"`

	Source    netip.AddrPort `json:"source"`    // packet source of the REGISTER
	Transport string         `json:"transport"` // "udp", "tcp"
	Local     netip.AddrPort `json:"local"`     // PBX listener that received it

	CallID    string    `json:"call_id"`
	CSeq      uint32    `json:"cseq"`
	UserAgent string    `json:"user_agent,omitempty"`
	Since     time.Time `json:"since"` // first registration of this contact
	Updated   time.Time `json:"updated"`
	Expires   time.Time `json:"expires"`
}

// Key identifies a binding for storage: tenant, username and contact.
func (b Binding) Key() string {
	return b.Tenant + "\x00" + b.Username + "\x00" + b.Contact
}

// Expired reports whether the binding has expired at now.
func (b Binding) Expired(now time.Time) bool { return !now.Before(b.Expires) }

// Target is where and how to send a request to a registered contact.
type Target struct {
	URI         sip.Uri        // Request-URI: the registered Contact
	Destination netip.AddrPort // where to send the packet
	Transport   string         // "udp" or "tcp"
	// ViaConnection is true when Destination is the registering connection
	// (TCP) or the NAT mapping (UDP) rather than the Contact's address.
	ViaConnection bool
	// Local is the listener that received the registration; the request
	// should leave through it.
	Local netip.AddrPort
}

// ConnChecker reports whether a connection to addr over transport is open.
// sipcore.Server.ConnectionOpen satisfies it.
type ConnChecker func(transport, addr string) bool

// Target decides where a call to this binding goes (DESIGN 5.5): to the
// Contact, unless the Contact reveals NAT (the REGISTER came from a public
// address different from the Contact's) in which case to the packet source.
// Over TCP the registering connection is reused while connOpen says it is
// open; otherwise the Contact is dialled.
func (b Binding) Target(connOpen ConnChecker) (Target, bool) {
	var u sip.Uri
	if err := sip.ParseUri(b.Contact, &u); err != nil {
		return Target{}, false
	}
	t := Target{URI: u, Transport: b.Transport, Local: b.Local}
	if tp, ok := u.UriParams.Get("transport"); ok && tp != "" && b.Transport == "" {
		t.Transport = strings.ToLower(tp)
	}
	contactAddr, contactIsIP := contactAddrPort(u, t.Transport)
	switch {
	case t.Transport == "tcp":
		if connOpen != nil && b.Source.IsValid() && connOpen("tcp", b.Source.String()) {
			t.Destination, t.ViaConnection = b.Source, true
		} else if contactIsIP {
			t.Destination = contactAddr
		} else {
			t.Destination, t.ViaConnection = b.Source, true
		}
	default:
		if !contactIsIP || behindNAT(contactAddr, b.Source) {
			t.Destination, t.ViaConnection = b.Source, true
		} else {
			t.Destination = contactAddr
		}
	}
	if !t.Destination.IsValid() {
		return Target{}, false
	}
	return t, true
}

func contactAddrPort(u sip.Uri, transport string) (netip.AddrPort, bool) {
	ip, err := netip.ParseAddr(strings.Trim(u.Host, "[]"))
	if err != nil {
		return netip.AddrPort{}, false
	}
	port := u.Port
	if port == 0 {
		port = 5060
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// behindNAT reports whether the Contact reveals NAT between the phone and
// the PBX, in the spirit of Kamailio's nat_uac_test and RFC 3581's
// "received": the Contact names another address than the one the REGISTER
// came from, or, on a public network, another port. On a private network a
// Contact on the source address is trusted whatever its port.
func behindNAT(contact, source netip.AddrPort) bool {
	if !source.IsValid() {
		return false
	}
	if contact.Addr() != source.Addr() {
		return true
	}
	src := source.Addr()
	if src.IsPrivate() || src.IsLoopback() || src.IsLinkLocalUnicast() {
		return false
	}
	return contact.Port() != source.Port()
}

// BehindNAT reports whether the binding's REGISTER revealed NAT: a Contact
// that is a host name, or that names another address than the packet's
// source. Such a phone gets keepalives, and over UDP a shorter expiry.
func (b Binding) BehindNAT() bool {
	var u sip.Uri
	if err := sip.ParseUri(b.Contact, &u); err != nil {
		return false
	}
	c, isIP := contactAddrPort(u, b.Transport)
	return !isIP || behindNAT(c, b.Source)
}
