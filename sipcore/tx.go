package sipcore

import (
	"net/netip"

	"github.com/emiago/sipgo/sip"
)

// serverTx decorates every response sent through a server transaction with
// the Server header, and remembers the sources it answers 2xx.
type serverTx struct {
	sip.ServerTransaction
	s *Server
}

func (t serverTx) Respond(res *sip.Response) error {
	t.s.DecorateResponse(res)
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		if stx, ok := t.ServerTransaction.(*sip.ServerTx); ok {
			if src, err := netip.ParseAddrPort(stx.Origin().Source()); err == nil {
				t.s.known.add(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()))
			}
		}
	}
	return t.ServerTransaction.Respond(res)
}

// WrapTx returns tx decorated so that responses carry the Server header
// and a 2xx marks its source as known (see knownSources). Handlers
// registered with Handle already receive a wrapped transaction.
func (s *Server) WrapTx(tx sip.ServerTransaction) sip.ServerTransaction {
	if tx == nil {
		return tx
	}
	if _, ok := tx.(serverTx); ok {
		return tx
	}
	return serverTx{ServerTransaction: tx, s: s}
}
