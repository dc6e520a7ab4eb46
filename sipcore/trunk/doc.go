// Package trunk keeps the PBX's carrier trunks: their outbound
// registration and the source addresses their calls are trusted from.
//
// Registration: a trunk with Register set sends REGISTER to host:port from
// the listener its ListenerID (else its Transport) names, answers a 401 or
// 407 with digest credentials, asks for Expiry seconds and refreshes before
// the granted expiry runs out (at nine tenths of it), so Expiry is the
// re-registration period. A 423 is answered with the Min-Expires the
// registrar asks for. A failed attempt is retried with a doubling backoff
// (RetryMin to RetryMax, with jitter). The state, the expiry and the last
// error are kept for the management API; Refresh re-registers at once.
//
// Source addresses: a trunk trusts MatchIPs (addresses or prefixes) plus,
// with AutoIPs, what its host resolves to: the host itself when it is an
// address, else its A and AAAA records and the targets of its _sip._udp
// and _sip._tcp SRV records. Discovery runs at start and every
// RefreshInterval (5 minutes). A lookup that fails (time-out, server
// failure, or nothing found at all) keeps the last good set and records the
// error. Match finds the trunk a packet source belongs to; when several
// trunks share an address, the one whose contact user or username is the
// Request-URI user wins, else the first configured.
//
// The package knows nothing of tenants or configuration documents: Tenant
// is an opaque label carried back to the caller.
//
// Caveats: until the first discovery of a host name finishes, only its
// MatchIPs are trusted. The registration Contact is the listener's
// advertised address; a NAT between the PBX and the carrier (rport and
// received in the response) is not corrected. Nothing is unregistered at
// shutdown: the listeners close with the process, so the carrier's binding
// lapses at its expiry.
package trunk
