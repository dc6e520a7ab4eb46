package mwi

import (
	"net/netip"
	"time"
)

// Subscription is one message-summary subscription dialog, as stored.
type Subscription struct {
	Mailbox string `json:"mailbox"` // the Mailboxes key
	Account string `json:"account"` // Message-Account URI, sip:<user>@<domain>
	// Subscriber is the authenticated account, username@domain (logs).
	Subscriber string `json:"subscriber"`

	CallID       string   `json:"call_id"`
	LocalTag     string   `json:"local_tag"`  // our To-tag
	RemoteTag    string   `json:"remote_tag"` // the subscriber's From-tag
	LocalURI     string   `json:"local_uri"`  // the SUBSCRIBE's To URI: our From
	RemoteURI    string   `json:"remote_uri"` // the SUBSCRIBE's From URI: our To
	RemoteTarget string   `json:"remote_target"`
	RouteSet     []string `json:"route_set,omitempty"` // Record-Route, in order
	RemoteCSeq   uint32   `json:"remote_cseq"`         // of the last SUBSCRIBE
	LocalCSeq    uint32   `json:"local_cseq"`          // of the last NOTIFY

	Source    netip.AddrPort `json:"source"`    // packet source of the SUBSCRIBE
	Transport string         `json:"transport"` // "udp" or "tcp"
	Local     netip.AddrPort `json:"local"`     // listener that received it

	Expires time.Time `json:"expires"`
}

// Key identifies a subscription: its dialog (Call-ID and both tags).
func (s Subscription) Key() string { return s.CallID + "\x00" + s.LocalTag + "\x00" + s.RemoteTag }

// Store persists subscriptions. SaveSubscriptions writes put and deletes
// the keys in remove; it runs outside the SIP handler path's locks.
type Store interface {
	LoadSubscriptions() ([]Subscription, error)
	SaveSubscriptions(put []Subscription, remove []string) error
}
