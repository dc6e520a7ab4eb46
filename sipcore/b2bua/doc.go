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
// groups); 180/183 are relayed to the caller (a 180 or 183 with SDP passes
// on as the same status with the PBX's own SDP, early media bridged from
// the first leg that sends it, so a carrier's ringback reaches the caller);
// the first 2xx wins and the other legs are cancelled (a late 2xx from a
// loser gets ACK and BYE). The caller's offer is negotiated against the
// configured codecs and every callee is offered exactly that set, so the
// relay never transcodes.
//
// Late offer (an INVITE without SDP, RFC 3261 section 13.2.1): the callees
// are offered every configured codec; the caller's 200 carries the PBX's
// offer with the codecs the answering callee accepted, and telephone-event;
// the caller's answer comes in the ACK. An ACK without a usable answer ends
// the call with BYE to both sides (cause failed). Such a caller gets no early
// media (an offer in an unreliable provisional is not allowed).
//
// Final answers to the caller: all legs busy (486/600) gives 486, no leg
// gives 480, ring timeout gives 480 (cause no_answer), no common codec gives
// 488, the Router's Rejection gives its status. A CANCEL from the caller
// cancels every leg and the caller gets 487. After answer a BYE from either
// side ends both; re-INVITEs (hold, resume) are passed to the other side
// with rewritten SDP, direction preserved (unless music on hold answers
// them, below); a call whose RTP stopped in both directions for
// MediaTimeout is ended with BYE to both sides (the timeout is suspended
// while the call is on hold).
//
// Music on hold (moh.go, with Options.MusicOnHold): a re-INVITE or UPDATE
// whose offer holds (sendonly, inactive, or c=0.0.0.0) is answered by the
// Manager with its own SDP, the direction mirrored (RFC 3264 section 6.1:
// recvonly, inactive; sendrecv to an old-style hold), in the codecs already
// agreed; it is not passed to the other party. While a side holds, nothing
// is sent toward it (an idle rtpcore Injection drops the relay), and the
// other side hears MusicOnHold.Music(call, byCaller) looped by an
// rtpcore.Player into an Injection on its leg (nil: G.711 silence packets),
// in the first G.711 codec the answering party accepted; the Injection keeps
// the leg's SSRC, sequence numbers and timestamps continuous and sets the
// marker bit when a feed starts; a feed that follows another toward the
// same leg replaces its Injection in one step (Injection.Replace), so that
// none of the other phone's packets slips through at the switch. While
// either side holds, every offer from
// either side is answered locally the same way (a held party's session
// refresh keeps its music going; its own hold makes both silent; the first
// holder's resume then plays it the other's music). The resume ends the
// feeds and the relay runs both ways again. CallInfo.Held and
// EventHeld/EventResumed follow "either side holds". A re-INVITE without
// offer is answered as before; its ACK's answer updates the hold. An
// offer that neither holds nor comes while the call is held is relayed as
// before. A transfer (transfer.go) stops the feeds of the calls it joins
// before the joined parties are bridged; the held transferee is still
// re-INVITEd to sendrecv (harmless: it never heard of the hold); from then
// on the joined parties' holds get music the same way (the class asked for
// the call, byCaller when the holder is the call's caller). Without
// MusicOnHold, UPDATE with SDP is refused with 488 and every hold is
// relayed. A call answered by a local application (Target.App) has no
// other party: its holds are the application's Channel's concern, not
// music on hold.
//
// Events: the Observer is called synchronously, serialised per call, for
// created, ringing, answered, leg-ended and ended. Implementations must be
// quick. The answered event is delivered before the 200 is relayed to the
// caller, so a call-record writer can put its crash marker down first. The
// ended event comes once every leg has settled, so it lists each leg's
// outcome (a cancelled leg settles when its 487 arrives; a leg that never
// answered anything for two seconds is dropped without waiting for one).
//
// Loops: legs carry the caller's Max-Forwards minus one; an INVITE arriving
// with Max-Forwards 1 or less is answered 483.
//
// In-dialog requests: BYE ends both sides, re-INVITE is relayed (491 while
// another is pending; answered locally with music on hold, above), INFO with a body other than DTMF is relayed to the
// other side and its status passed back, in-dialog OPTIONS and UPDATE without
// SDP are answered 200, UPDATE with SDP 488 (but a hold or resume with music
// on hold), and requests for unknown dialogs
// 481. A re-INVITE without SDP gets the PBX's offer in the 200 and the
// answer in the ACK moves that side's media. The 2xx the PBX answers a
// re-INVITE with is retransmitted (T1 doubling to T2) until its ACK arrives;
// after 64*T1 without one the call ends with BYE to both sides (RFC 3261
// section 13.3.1.4). A retransmitted 2xx whose INVITE transaction already
// ended is ACKed again, on either side, with the CSeq of the INVITE or
// re-INVITE it answers. A caller's re-INVITE that overtakes its ACK of the
// initial 2xx waits up to two seconds for that ACK (then 491).
//
// Transfer (transfer.go): a REFER (RFC 3515) from either party of an
// answered call is accepted with 202 and run on the goroutine that serves
// the call's end and changes (endwait.go), with NOTIFYs carrying
// message/sipfrag status lines (100 Trying, 180 Ringing
// when the target rings, then the final status, section 2.4.5; none with
// Refer-Sub: false, RFC 4488). A blind transfer routes the Refer-To URI
// through the Router as a call from the transferor (Inbound.Transfer set),
// rings its legs like a fork (the transferee hears a target's early media)
// and, on answer, bridges the transferee's media leg
// to the new one and releases the transferor (BYE after two seconds unless
// it hung up itself); a failed target leaves the call as it was (as
// Asterisk does), unless the transferee or transferor is gone. An attended
// transfer (Refer-To with an embedded Replaces, RFC 3891 and RFC 5589
// section 7) names the transferor's other call through the PBX: the two
// far parties are bridged, across the two calls' media sessions, and the
// other call ends with reason "transferred" (its media stays open until
// the joined call ends). A transferee that was held is re-INVITEd to
// sendrecv. Joined parties' re-INVITEs, INFO and BYE are relayed between
// them (INFO as is, without DTMF interworking); session timers follow the
// parties (the transferor's stops, the new leg's starts, a joined party's
// refresh re-arms its side); EventTransfer reports each transfer's outcome. A new INVITE with
// Replaces (RFC 3891, replaces.go) naming an answered party of another
// call of the same tenant takes that party's place: the party gets BYE,
// its call ends ("transferred") and the INVITE's caller is joined to the
// party it was talking to, recorded as an attended transfer.
//
// An INVITE whose Require names an extension the PBX lacks (100rel, RFC
// 3262) is answered 420 with Unsupported before authentication. A rejected
// call ends when its final response is sent, not when the ACK arrives.
//
// Session timers (RFC 4028, timer.go): each side negotiates its own
// interval and refresher; below Options.MinSE an INVITE or UPDATE gets 422
// with Min-SE. The PBX refreshes the sides where it is refresher at half the
// interval (UPDATE without SDP when the peer allows it, else a re-INVITE
// with the SDP unchanged) and ends the call with BYE to both sides, reason
// ReasonSessionExpired, when a peer that is refresher lets the interval
// (less min(32 s, a third)) pass without refreshing.
//
// DTMF (dtmf.go): a digit reaches each far end in the form it negotiated:
// RFC 4733 events when its SDP has telephone-event (INFO is converted), SIP
// INFO application/dtmf-relay otherwise (events are converted, and not
// relayed there). The caller's digits, either way, are kept in
// CallInfo.Digits.
//
// Local applications (app.go, app_call.go, channel.go): a Target with App
// set is answered by the PBX itself: 200 with the SDP of the caller's own
// media leg (G.711 negotiated against the configured codecs as for a
// dial, telephone-event when the caller offers it; a late-offer caller
// gets the offer in the 200 and answers in the ACK), the created and
// answered events as for any call, with one leg of kind KindLocal named
// by Target.Name ("app" when empty; answered_by stays empty). App.Run
// then runs on its own goroutine with a Channel: Play sends through one
// injection held for the whole call, a frame every 20 ms (silence between
// plays), so sequence numbers and timestamps never break; Digits gets each
// RFC 4733 key press and each INFO digit (HideDigits keeps later ones off
// CallInfo.Digits); Listen decodes the caller's audio onto a wall-clock
// time line (a missing frame is silence, a late or duplicate packet is
// dropped, a slow reader loses the oldest frames beyond 2 s) through a tap
// that never blocks the relay. Run returning hangs up with BYE (its cause
// goes on the record); the caller's BYE, Hangup, a media timeout or a
// session timer cancel Run's context and Run is awaited for two seconds.
// The caller's re-INVITEs are answered by the PBX (direction mirrored, the
// application goes on; nothing is sent while the caller holds); REFER and Replaces naming such a call get 491 and
// 481 (there is no far party to transfer). Target.Next: when every leg of
// a dial failed (busy, no answer, ring timeout, no contact, rejected; never
// after the caller cancelled or the call was hung up), Next runs on the
// call's goroutine with the failure the caller would get; the Target it
// returns runs instead (another dial, whose legs follow the first's on the
// record, or an App answering at once), nil gives the caller the failure.
// The failed legs' early media stops before Next is asked.
//
// Failover (failover.go): a leg with LegTarget.Alternates (a trunk's SRV
// targets) sends its INVITE to the next one after a 503 or after
// Options.FailoverAfter without any response (RFC 3263 section 4.3).
//
// Caveats: ACK and CANCEL
// are built by sipgo and carry no User-Agent. Requests toward a leg whose
// destination differs from its Contact (NAT, the registering TCP
// connection) carry a Request-URI rewritten to that destination, as
// Asterisk's rewrite_contact does, because sipgo sends CANCEL to the
// Request-URI.
package b2bua
