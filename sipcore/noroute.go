package sipcore

import (
	"github.com/emiago/sipgo/sip"
)

// StatusBadEvent is 489 (Bad Event, RFC 6665), which sipgo
// does not name.
const StatusBadEvent = 489

// handleNoRoute answers a request whose method has no handler. The PBX
// implements no event package, no REFER (transfer) and no reliable
// provisional responses yet, so:
//
//   - SUBSCRIBE gets 489 (Bad Event): the method is understood but no event
//     package is supported (RFC 6665 section 4.2.1.1);
//   - PRACK gets 420 (Bad Extension) with Unsupported: 100rel, the answer
//     of a UAS that does not implement RFC 3262: the PBX never sends a
//     reliable provisional response, so nothing can be acknowledged;
//   - anything else (REFER, MESSAGE, NOTIFY, PUBLISH...) gets 405 (Method
//     Not Allowed) with the Allow header RFC 3261 section 8.2.1 requires.
//
// Refusals are routine (phones probe for these features), so they log at
// debug level only.
func (s *Server) handleNoRoute(req *sip.Request, tx sip.ServerTransaction) {
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
		res.AppendHeader(sip.NewHeader("Allow", s.Allow()))
	}
	s.log.Debug("sip request refused", "method", req.Method.String(), "status", res.StatusCode, "source", req.Source())
	if err := s.WrapTx(tx).Respond(res); err != nil {
		s.log.Debug("respond to unhandled request", "method", req.Method.String(), "err", err)
	}
}
