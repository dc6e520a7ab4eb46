// Package b2bua runs calls: a Call owns the caller's leg, one outgoing leg
// per forked target and one rtpcore media Session that anchors every RTP
// packet of the call.
//
// A new INVITE is authenticated with digest (407, credentials of the tenant
// owning the domain) unless Options.Identify says the source is trusted
// (trunks, the room-service bridge). The Router decides: a Rejection, or a
// Target listing the legs to fork to, the ring timeout, the caller identity
// to present and the metadata the appliance wants on the call record. Every
// leg is tried at once (LegTarget.Delay staggers legs for sequential ring
// groups); 180/183 are relayed to the caller (183 with the PBX's own SDP,
// early media bridged from the first leg that sends it); the first 2xx wins
// and the other legs are cancelled (a late 2xx from a loser gets ACK and
// BYE). The caller's offer is negotiated against the configured codecs and
// every callee is offered exactly that set, so the relay never transcodes.
//
// Final answers to the caller: all legs busy (486/600) gives 486, no leg
// gives 480, ring timeout gives 480 (cause no_answer), no common codec gives
// 488, the Router's Rejection gives its status. A CANCEL from the caller
// cancels every leg and the caller gets 487. After answer a BYE from either
// side ends both; re-INVITEs (hold, resume) are passed to the other side
// with rewritten SDP, direction preserved; a call whose RTP stopped in both
// directions for MediaTimeout is ended with BYE to both sides (the timeout
// is suspended while the call is on hold).
//
// Events: the Observer is called synchronously on the call's goroutine for
// created, ringing, answered, leg-ended and ended. Implementations must be
// quick. The answered event is delivered before the 200 is relayed to the
// caller, so a call-record writer can put its crash marker down first.
//
// Caveats: an INVITE without SDP (late offer) is answered 488; the PBX
// always offers. Requests inside a dialog other than BYE, ACK and INVITE
// are answered 200 without being relayed (INFO, OPTIONS, UPDATE without
// SDP), UPDATE with SDP gets 488, and requests for unknown dialogs 481.
package b2bua
