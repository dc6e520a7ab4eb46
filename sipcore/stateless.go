package sipcore

import (
	"encoding/hex"
	"hash/fnv"
	"net/netip"
	"strconv"

	"github.com/emiago/sipgo/sip"
)

// versionNotSupported answers a request whose SIP-Version is not 2.0 with
// 505 (RFC 3261 21.5.6; the response carries SIP/2.0, the version the PBX
// speaks). A datagram that cannot be parsed that far is dropped.
func (u *udpListener) versionNotSupported(data []byte, src netip.AddrPort) {
	req, ok := u.parseRequest(data, src)
	if !ok || req.IsAck() {
		u.s.stats.badVersionDropped.Add(1)
		return
	}
	u.reply(req, sip.NewResponseFromRequest(req, sip.StatusVersionNotSupported, "Version Not Supported", nil), src)
	u.s.stats.versionRejected.Add(1)
}

// tooLarge answers a datagram over UDPMaxMessage with 513 (RFC 3261 21.5.7;
// 18.1.1 has a client move such a request to TCP) when its headers parse;
// otherwise, and for responses and ACKs, it is dropped.
func (u *udpListener) tooLarge(data []byte, src netip.AddrPort) {
	req, ok := u.parseRequest(data, src)
	if !ok || req.IsAck() {
		u.s.stats.tooLargeDropped.Add(1)
		return
	}
	u.reply(req, sip.NewResponseFromRequest(req, sip.StatusMessageTooLarge, "Message Too Large", nil), src)
	u.s.stats.tooLarge.Add(1)
}

// options answers an out-of-dialog OPTIONS statelessly and reports whether
// it did. An in-dialog one (To tag) is left to the stack.
func (u *udpListener) options(data []byte, src netip.AddrPort) bool {
	req, ok := u.parseRequest(data, src)
	if !ok {
		u.s.stats.malformedDropped.Add(1)
		return true
	}
	if req.Method != sip.OPTIONS || hasToTag(req) {
		return false
	}
	// RFC 3261 8.2.7: a stateless UAS gives the same To tag to every copy
	// of a request.
	req.To().Params.Add("tag", statelessTag(req))
	u.reply(req, u.s.optionsResponse(req), src)
	u.s.stats.statelessOptions.Add(1)
	return true
}

// strayBye answers 481 statelessly to a BYE that belongs to no dialog
// (Server.SetDialogLookup) and to no open transaction (a retransmission
// of a BYE answered by the stack gets that answer again), and reports
// whether it did.
func (u *udpListener) strayBye(data []byte, src netip.AddrPort) bool {
	inDialog := u.s.inDialog.Load()
	if inDialog == nil {
		return false
	}
	req, ok := u.parseRequest(data, src)
	if !ok {
		u.s.stats.malformedDropped.Add(1)
		return true
	}
	if req.Method != sip.BYE {
		return false
	}
	key, err := sip.ServerTxKeyMake(req)
	if err != nil || u.s.txs.has(key) || (*inDialog)(req) {
		return false
	}
	u.s.stats.strayBye.Add(1) // counted before the answer leaves
	u.reply(req, sip.NewResponseFromRequest(req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist", nil), src)
	return true
}

// refuseOverCap answers 503 with Retry-After to a request that would open a
// server transaction past the cap, and reports whether it did. ACK and
// CANCEL (which belong to an INVITE transaction), retransmissions of an
// open transaction and, within the reserve, requests from known sources
// (knownSources) go on to the stack.
func (u *udpListener) refuseOverCap(data []byte, src netip.AddrPort) bool {
	req, ok := u.parseRequest(data, src)
	if !ok {
		u.s.stats.malformedDropped.Add(1)
		return true
	}
	if req.IsAck() || req.IsCancel() {
		return false
	}
	key, err := sip.ServerTxKeyMake(req)
	if err != nil || u.s.txs.has(key) {
		return false
	}
	if !u.s.txs.fullForKnown() && u.s.known.has(netip.AddrPortFrom(src.Addr().Unmap(), src.Port())) {
		return false
	}
	u.shed(req, src)
	return true
}

// shed answers 503 with Retry-After to a request the PBX has no room for
// (past the transaction cap, or a REGISTER its workers cannot take), counted
// before the answer leaves so whoever reads the 503 sees it counted.
func (u *udpListener) shed(req *sip.Request, src netip.AddrPort) {
	res := NewResponse(req, sip.StatusServiceUnavailable, "Service Unavailable")
	res.AppendHeader(sip.NewHeader("Retry-After", strconv.Itoa(RetryAfterOverload)))
	u.s.stats.refusedOverCap.Add(1)
	u.reply(req, res, src)
	u.s.noteOverload()
}

// statelessTag derives a To tag from what identifies the request, so that a
// retransmission gets the same one.
func statelessTag(req *sip.Request) string {
	h := fnv.New64a()
	h.Write([]byte(req.CallID().Value()))
	if tag, ok := req.From().Params.Get("tag"); ok {
		h.Write([]byte(tag))
	}
	if branch, ok := req.Via().Params.Get("branch"); ok {
		h.Write([]byte(branch))
	}
	h.Write([]byte(strconv.FormatUint(uint64(req.CSeq().SeqNo), 10)))
	return hex.EncodeToString(h.Sum(nil))
}
