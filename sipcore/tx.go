package sipcore

import "github.com/emiago/sipgo/sip"

// serverTx decorates every response sent through a server transaction with
// the Server header.
type serverTx struct {
	sip.ServerTransaction
	s *Server
}

func (t serverTx) Respond(res *sip.Response) error {
	t.s.DecorateResponse(res)
	return t.ServerTransaction.Respond(res)
}

// WrapTx returns tx decorated so that responses carry the Server header.
// Handlers registered with Handle already receive a wrapped transaction.
func (s *Server) WrapTx(tx sip.ServerTransaction) sip.ServerTransaction {
	if tx == nil || s.userAgent == "" {
		return tx
	}
	if _, ok := tx.(serverTx); ok {
		return tx
	}
	return serverTx{ServerTransaction: tx, s: s}
}
