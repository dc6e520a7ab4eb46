// Package registrar answers REGISTER with digest authentication and keeps the
// location bindings (who is reachable where).
//
// Authentication is shared with INVITE: Auth challenges with qop=auth, one
// header per algorithm of AuthOptions.Algorithms in that order (MD5 alone by
// default, as Asterisk and Kamailio do: Debian 12's baresip gives up on a
// second header, many desk phones speak only MD5), accepts a response only
// for an algorithm it offered (RFC 8760), verifies the digest uri against the
// Request-URI, compares in constant time and refuses a replayed nc. An
// unknown user, an unknown domain and a wrong password are answered with
// byte-identical messages (modulo the nonce and tags) after the same amount
// of hashing, so the answers do not reveal which accounts exist.
//
// Nonces are stateless: a timestamp, random bytes and an HMAC under a
// process secret, valid for NonceTTL (30 s by default, like Asterisk's 32;
// then the client gets stale=true and answers the new challenge). Memory is
// spent only on nonces that authenticated a request (to track nc), so an
// unauthenticated flood cannot grow state, and that table is bounded
// (MaxTrackedNonces): when full, a nonce cannot be reused and the client is
// simply challenged again. The table is kept in generations by the nonces'
// expiry second, and a generation is let go whole once its nonces have
// expired (a timer looks every second while any are tracked), so the table
// empties as a load's nonces expire without a pass over the live ones
// (replay.go).
//
// Bindings: several contacts per account up to its maxContacts (default 5).
// When a new contact would exceed the limit the binding that expires soonest
// is replaced, as Asterisk does with remove_existing=yes (a rebooted phone
// that registers from a new port must not lock itself out); set
// Options.RejectWhenFull to answer 403 instead, as Asterisk does without
// remove_existing. A contact carrying +sip.instance replaces the binding
// with the same instance (RFC 5626). Expiry is clamped to MaxExpires and
// refused below MinExpires with 423 Interval Too Brief.
//
// Each binding keeps the packet source, transport and local listener address
// of the REGISTER so calls can be sent to the Contact unless it reveals NAT,
// and over TCP through the registering connection while it is open (see
// Binding.Target).
//
// NAT: a binding whose Contact is a host name or names another address than
// the REGISTER's source is behind NAT (Binding.BehindNAT). Over UDP it is
// granted at most NATExpires, and while registered it gets an OPTIONS
// keepalive through its mapping every KeepaliveInterval (any answer proves
// the mapping open); over TCP its connection gets a CRLF ping (RFC 5626
// section 3.5.1). Keepalives need Options.SIP.
//
// Persistence: a Store (implemented by package db) receives changed and
// removed bindings in batches from a write-behind loop (Run), never on the
// REGISTER path, and restores them at New (expired ones dropped). Close
// flushes what is pending.
//
// The registrar knows tenants only as opaque ids handed out by the
// Directory.
package registrar
