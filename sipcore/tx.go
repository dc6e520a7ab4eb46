package sipcore

import (
	"errors"
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
	err := t.ServerTransaction.Respond(res)
	if err != nil && errors.Is(err, sip.ErrTransactionTerminated) && res.IsSuccess() && isInviteResponse(res) {
		// The UAS core retransmits an INVITE's 2xx until the ACK, for up
		// to 64*T1 (RFC 3261 13.3.1.4); the transaction passes each
		// retransmission to the transport while it lasts (RFC 6026 7.1)
		// and has ended CompletedLinger after the first (Timer L, or
		// at once over TCP): the transport takes it now.
		return t.s.srv.WriteResponse(res)
	}
	return err
}

func isInviteResponse(res *sip.Response) bool {
	cseq := res.CSeq()
	return cseq != nil && cseq.MethodName == sip.INVITE
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

// releasesRequest reports whether the request of a method is released once
// its handler returns (see releaseRequest). Only methods whose handlers keep
// nothing of the request after returning qualify: REGISTER, answered by the
// registrar synchronously, and the one that floods.
func releasesRequest(method sip.RequestMethod) bool { return method == sip.REGISTER }

// releaseRequest drops the headers and body of req once its handler has
// returned. sipgo keeps a server transaction's request (its origin) for as
// long as the transaction lingers in Completed to absorb retransmissions
// (Timer J, CompletedLinger), but after the handler only compares the
// method of a retransmission with it and resends the final response it
// kept: measured over loopback UDP, the parsed request was about 2.3 kB of
// the 5.1 kB each completed REGISTER transaction held. Headers are removed
// one by one (sipgo offers no way to replace the list); each removal shifts
// the list left, so the last header stays referenced from the slice's spare
// capacity until the appended empty Content-Length overwrites the first
// slot: what remains is the request line, one small header and the routing
// fields.
func releaseRequest(req *sip.Request) {
	for hs := req.Headers(); len(hs) > 0; hs = req.Headers() {
		if !req.RemoveHeader(hs[0].Name()) {
			return // cannot happen: the name is the first header's own
		}
	}
	req.SetBody(nil)
}
