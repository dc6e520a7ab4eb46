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
// DefaultMaxTracked), spread over 32 shards, each with its own lock and its
// own list of sources ordered by when they were last seen. When the tracker
// is full, a new source (a packet or an authentication failure) takes the
// place of the least recently seen blameless source: one with no active
// ban, no failure inside authWindow and no offence still remembered.
// Sources with failures or bans are never evicted, so a flood of spoofed
// keep-alives cannot make room by pushing a brute-forcer out, nor keep one
// from being tracked and banned. The order is an approximate LRU: the
// eviction looks at the evictScan oldest sources of the new source's own
// shard (moving those with failures or bans to the front as it passes),
// then of the other shards in turn, so the source forgotten is among the
// least recently seen of its shard, not necessarily of the whole tracker.
// Only when every tracked source it looks at carries a failure or a ban
// does the guard fail open: the source is admitted (and its failure
// ignored) without tracking. Evictions and fail-open events are counted
// (Counters.Evicted, Counters.Untracked), and both are logged at warning
// level once a minute at most, with the count of events since the last
// line (evictions by the janitor, so no log line is written under a
// shard's lock). The janitor (Run) forgets sources whose state has become
// the same as a new source's: blameless, and a token bucket that has
// refilled.
//
// # Accounts
//
// Authentication failures are also counted per account (tenant and
// username) across sources, so guessing one password from many addresses,
// each staying below authFailures, is stopped: accountFailures (default
// 10, as a fail2ban asterisk jail) failures within accountWindow (10
// minutes) lock the account until accountLock (10 minutes) after the last
// failure, while further failures keep it locked; accountFailures 0 never
// locks. While it is locked, valid credentials for it are refused with 403
// (the answer to wrong ones, so a guesser cannot tell a right guess)
// unless they come from an address that authenticated successfully for the
// account within AccountOptions.Trust (a day): a phone registered from its
// own address keeps working. Only existing accounts are counted, at most maxAccounts
// of them, with at most maxTrustedPerAccount trusted addresses each.
// Exempt sources neither count nor are refused. Each new lock and each
// refusal is logged at warning level, at most once a minute per kind with
// a count; the counts are in Counters.
//
// # Disabled
//
// With security.enabled false, Admit admits everything and nothing is
// banned or locked, but packets and authentication failures are still
// counted.
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
// belongs in security.allow. Addresses are tracked one by one, IPv6
// included, so an attacker rotating through an IPv6 /64 is rate limited
// per address, and one failing authentication from more than maxTracked
// real addresses fills the tracker with sources that cannot be evicted
// and makes it fail open (logged); the account lock still stops it
// guessing a password. A phone whose address changed during an account
// lock is refused until the lock ends. security.acl and requireSrtp are
// never read.
package guard
