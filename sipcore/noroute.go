package sipcore

import (
	"github.com/emiago/sipgo/sip"
)

// quietMethods are SIP extension methods phones send on their own
// (presence, message waiting, transfer, instant messages). Refusing them is
// routine, so it is logged at debug level.
var quietMethods = map[sip.RequestMethod]bool{
	sip.SUBSCRIBE: true, sip.NOTIFY: true, sip.REFER: true, sip.PUBLISH: true, sip.MESSAGE: true,
}

// refuseUnknownMethod answers a request no handler takes with 405 and the
// Allow header (RFC 3261 8.2.1). It logs the method and source at debug
// level for the methods phones routinely send, else at info level with a
// kind, so that a flood is rate-limited; never once per request at warning
// level.
func (s *Server) refuseUnknownMethod(req *sip.Request, tx sip.ServerTransaction) {
	logf := s.log.Info
	if quietMethods[req.Method] {
		logf = s.log.Debug
	}
	logf("method not allowed", "method", printable(req.Method.String()), "src", req.Source(), "transport", req.Transport(), LogKindKey, KindUnknownMethod)
	res := sip.NewResponseFromRequest(req, sip.StatusMethodNotAllowed, "Method Not Allowed", nil)
	res.AppendHeader(sip.NewHeader("Allow", s.Allow()))
	if err := s.WrapTx(tx).Respond(res); err != nil {
		s.log.Debug("respond 405", "err", err)
	}
}
