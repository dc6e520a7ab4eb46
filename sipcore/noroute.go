package sipcore

import (
	"github.com/emiago/sipgo/sip"
)

// StatusBadEvent is 489 (Bad Event, RFC 6665), which sipgo
// does not name.
const StatusBadEvent = 489

// quietMethods are SIP extension methods phones send on their own
// (presence, message waiting, transfer, instant messages, reliable
// provisional responses). Refusing them is routine, so it is logged at
// debug level.
var quietMethods = map[sip.RequestMethod]bool{
	sip.SUBSCRIBE: true, sip.NOTIFY: true, sip.REFER: true, sip.PUBLISH: true, sip.MESSAGE: true, sip.PRACK: true,
}

// handleNoRoute answers a request whose method has no handler (REFER is
// handled by the b2bua when it runs, SUBSCRIBE by package mwi when message
// waiting is on). The PBX implements no reliable provisional responses, so:
//
//   - SUBSCRIBE gets 489 (Bad Event): the method is understood but no event
//     package is served (RFC 6665 section 4.2.1.1), so the answer carries
//     no Allow-Events;
//   - PRACK gets 420 (Bad Extension) with Unsupported: 100rel, the answer
//     of a UAS that does not implement RFC 3262: the PBX never sends a
//     reliable provisional response, so nothing can be acknowledged;
//   - anything else (REFER, MESSAGE, NOTIFY, PUBLISH, an unknown token) gets
//     405 (Method Not Allowed).
//
// Every one of these refusals carries the Allow header (RFC 3261 section
// 8.2.1 requires it in a 405; in the others it tells the client what it
// may send instead).
//
// The methods phones routinely send are logged at debug level; any other
// at info level with a kind the daemon's logger rate-limits, so a flood is
// never one warning per request. Both lines carry the source.
func (s *Server) handleNoRoute(req *sip.Request, tx sip.ServerTransaction) {
	if !s.admitTx(req, tx) {
		return
	}
	var res *sip.Response
	switch req.Method {
	case sip.ACK:
		// An ACK matching nothing is dropped (RFC 3261 section 17.2.3).
		return
	case sip.SUBSCRIBE:
		res = Response(req, StatusBadEvent)
	case sip.PRACK:
		res = BadExtension(req, []string{"100rel"})
	default:
		res = Response(req, sip.StatusMethodNotAllowed)
	}
	res.AppendHeader(sip.NewHeader("Allow", s.Allow()))
	logf := s.log.Info
	if quietMethods[req.Method] {
		logf = s.log.Debug
	}
	logf("sip request refused", "method", printable(req.Method.String()), "status", res.StatusCode,
		"src", req.Source(), "transport", req.Transport(), LogKindKey, KindUnknownMethod)
	if err := s.WrapTx(tx).Respond(res); err != nil {
		s.log.Debug("respond to unhandled request", "method", printable(req.Method.String()), "err", err)
	}
}
