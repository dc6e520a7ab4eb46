// Package guard is the security guard of the PBX: it decides, packet by
// packet and before the SIP stack parses anything, whether a source may be
// heard, bans sources that fail authentication too often, and enforces the
// call limits of security.limits.
//
// # Admission
//
// Guard.Admit has the shape of sipcore.Admitter and runs on the socket's read
// goroutine for every UDP datagram and every whole SIP message of an accepted
// TCP connection. Its checks, in order:
//
//  1. deny list: a source matching security.deny is dropped (deny wins over
//     allow);
//  2. allow list and, with trustLoopback, loopback addresses: exempt from
//     throttling and banning;
//  3. an active ban drops the packet;
//  4. the per-source token bucket (packetRate per second, burst packetBurst,
//     the burst raised to the rate when lower) drops what exceeds it;
//  5. maxDatagram (UDP only, 0 off) drops larger datagrams, from any source
//     the deny list did not already drop, exempt sources included.
//
// A refused packet is dropped silently and counted. Admit does not allocate
// for a source it already tracks; prefix lists are matched with one map
// lookup per distinct prefix length, not by scanning.
//
// Exceeding the packet rate only drops the excess: it never bans. Bans come
// from authentication failures alone, because they need a round trip (a
// challenge answered with wrong credentials), whereas a UDP source address
// is trivially forged: a packet-rate ban would let anyone ban a carrier or a
// phone by flooding with its address.
//
// # Bans
//
// authFailures wrong credentials (Guard.RecordAuthFailure, fed by the
// registrar's and the call manager's OnAuthFailure hooks) from one address
// within authWindow ban the address for banDuration. Each repeat offence
// doubles the ban, up to banMax; the count of offences is forgotten once the
// address has stayed unbanned for banMax. Lifting a ban (Guard.Lift) also
// forgets the address's offences and failures. authFailures 0 never bans.
//
// # Tracking
//
// Per-source state is kept for at most maxTracked addresses (0 means
// DefaultMaxTracked). When the tracker is full a new source is admitted
// without tracking (fail open) and counted; an authentication failure from
// an untracked source evicts an idle source to make room, so a brute-force
// attack can still be banned while the tracker is full. The janitor (Run)
// forgets sources whose state has become the same as a new source's: no
// active ban, no failure inside the window, no offence to remember, and a
// token bucket that has refilled.
//
// # Disabled
//
// With security.enabled false, Admit admits everything and nothing is
// banned, but packets and authentication failures are still counted.
//
// # Call limits
//
// Limiter enforces security.limits (a tenant's limits override the System's
// key by key): concurrent calls per tenant and per account (an inter-tenant
// call counts for both tenants, its account for the caller's own), outbound
// call setups per minute, and outbound minutes per clock hour and calendar
// month of the tenant's time zone. A call is outbound when a leg leaves on a
// trunk. Answered outbound calls are metered while they run (Run, every
// second) and cut through OnExhausted when a budget is spent; the counters
// persist through a MinutesStore (bbolt), so a restart does not reset them.
// Limits apply whether or not the guard is enabled. Blocked prefixes are not
// checked here: routing owns them.
//
// Caveats: every SIP packet of a source counts toward its rate, responses
// included, so a carrier sending more than packetRate packets per second
// belongs in security.allow. Addresses are tracked one by one, IPv6 included, so an attacker
// rotating through an IPv6 /64 is rate limited per address. security.acl
// and requireSrtp are never read.
package guard
