// Package routing decides where a call goes, as pure functions over a
// compiled Table: no I/O, no clock, no registrar. The appliance turns a
// Result into SIP legs (registered contacts, a trunk) and a call record.
//
// Inbound (a call that arrived on a trunk):
//
//  1. InboundOverrides first: an override whose did equals the number, in
//     ascending priority with ties broken by metadata.name; then the `*`
//     catch-alls in the same order, after every numbered override whatever
//     their priority. An override with a destination delivers only
//     extension and ring_group; the other five types are an invalid
//     destination type and are answered 404. An override without a
//     destination only reassigns the tenant, whose InboundRoutes decide.
//     Overrides apply on every trunk, also a trunk pinned to a tenant.
//  2. Otherwise the tenant is the trunk's (a trunk with spec.tenant pins
//     every call), or on a shared trunk the tenant that claims the number.
//  3. That tenant's InboundRoutes for the number, ascending priority (ties
//     by name); a route with did `*` catches the tenant's other numbers.
//     Destinations: extension, ring_group, hangup (603), external (the
//     tenant's outbound routing) and voicemail (KindVoicemail: a deposit
//     into the target extension's mailbox) are delivered; queue and ivr
//  404. An unknown number is 404 with cause no_route.
//
// The number is the Request-URI user, then the To user; each is tried as
// written and with its leading + added or removed.
//
// From an account: the tenant's featureCodes.voicemail opens the caller's
// own mailbox and featureCodes.voicemailOther a mailbox the caller names
// (KindVoicemailCheck); a feature code never leaves on a trunk. Another tenant's extension@domain, ring group or DID is
// an inter-tenant call, allowed only when the System ceiling and both
// tenants allow it; the caller's own extensions, ring groups and DIDs stay
// inside the tenant; anything else is outbound.
//
// Outbound: the calling tenant's own OutboundRoutes (ascending priority,
// first match wins), then the global ones, then System.defaultTrunk with
// the number unchanged, else no_route. Patterns are regular expressions
// that are not implicitly anchored; strip removes digits from the front
// before prepend adds its text. security.limits.blockedPrefixes (a
// tenant's limits.blockedPrefixes, when spelled out, even empty, replaces
// the System's) is checked on
// the number as dialled and as it would be sent, whether or not the
// security guard is enabled; a hit is 403, cause rejected, with the prefix
// in the reason. Calls that a DID of the caller's own tenant or an inbound
// route's external destination send out are checked the same way. The caller identity presented is
// the account's callerId, else the tenant's, else the trunk's.
//
// Caveats: a Table is built from one validated configuration and never
// changes; build a new one to change routing. Route matching prefilters
// patterns anchored with ^ and a literal prefix through a trie, so a
// tenant's or the global list of thousands of routes costs only the
// patterns that could match.
package routing
