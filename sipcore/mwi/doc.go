// Package mwi is the notifier of the message-summary event package (RFC 3842
// over RFC 6665 SUBSCRIBE/NOTIFY): phones subscribe to a mailbox and get a
// NOTIFY with its counts at once, on every change, on refresh and at the end.
//
// A SUBSCRIBE outside a dialog is authenticated with digest exactly like
// REGISTER (401, registrar.Auth.Authenticate, the guard's hooks); the
// subscriber is the authenticated account. The mailbox is the Request-URI
// user, which the Mailboxes interface resolves (a phone may subscribe only to
// its own tenant's mailboxes: 403 otherwise, 404 for no mailbox). Expires is
// negotiated: DefaultExpires when absent, 423 Interval Too Brief with
// Min-Expires below MinExpires, clamped to MaxExpires; 0 on a new
// subscription is a fetch (one NOTIFY, terminated). The answer is 200 OK
// (RFC 6665 deprecates 202) with our To-tag, Contact and Expires, followed
// by a NOTIFY with Subscription-State active;expires=N.
//
// A SUBSCRIBE inside the dialog (matched by Call-ID and tags, which are
// not guessable) refreshes it without a new challenge; Expires: 0 ends it
// with a NOTIFY terminated;reason=timeout. When a subscription expires
// unrefreshed it gets the same final NOTIFY. A NOTIFY answered 481 or 408,
// or not answered at all, ends the subscription silently. Other event
// packages are refused with 489, Allow-Events: message-summary and Allow;
// an Accept that excludes application/simple-message-summary gets 406.
//
// An account holds at most MaxPerSubscriber subscriptions (32): past it a
// new one replaces the one expiring soonest, silently, as the registrar
// replaces bindings (a rebooted phone subscribes again without ending its
// old dialogs).
//
// NOTIFYs go to the subscriber's Contact unless it reveals NAT, then to the
// SUBSCRIBE's packet source; over TCP through the subscribing connection
// while it is open (registrar.Binding.Target decides, as for calls).
//
// Persistence: a Store receives every subscription created or changed
// (with the CSeq of the last NOTIFY) and removed; New loads them (expired
// ones dropped) and Run sends each a NOTIFY once the SIP listeners serve, so
// the phones' lamps are right after a restart.
//
// The package knows tenants only through the Mailboxes interface: a mailbox
// is an opaque key.
package mwi
