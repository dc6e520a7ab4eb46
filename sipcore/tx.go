package sipcore

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo/sip"
)

// serverTx decorates every response sent through a server transaction with
// the Server header, and remembers the sources it answers 2xx.
type serverTx struct {
	sip.ServerTransaction
	s *Server
	// answered is when the first 2xx of an INVITE's transaction went out
	// (Unix nanoseconds, 0 before); nil for other methods.
	answered *atomic.Int64
}

// answerWindow is how long after its first 2xx the UAS core retransmits
// an INVITE's 2xx waiting for the ACK (RFC 3261 13.3.1.4: 64*T1).
func answerWindow() time.Duration { return 64 * sip.T1 }

func (t serverTx) Respond(res *sip.Response) error {
	t.s.DecorateResponse(res)
	ok2xx := res.StatusCode >= 200 && res.StatusCode < 300
	if ok2xx {
		if stx, ok := t.ServerTransaction.(*sip.ServerTx); ok {
			if src, err := netip.ParseAddrPort(stx.Origin().Source()); err == nil {
				t.s.known.add(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()))
			}
		}
	}
	err := t.ServerTransaction.Respond(res)
	if t.answered == nil || !ok2xx {
		return err
	}
	now := time.Now().UnixNano()
	if err == nil {
		t.answered.CompareAndSwap(0, now)
		return nil
	}
	// The UAS core (sipgo's dialog) retransmits the 2xx until the ACK and
	// stops when a retransmission fails. The transaction passes each one
	// to the transport while it lasts (RFC 6026 7.1), but ends
	// CompletedLinger after the first (Timer L, 64*T1 in the RFC), or at
	// once over TCP: the transport takes them for the rest of 64*T1.
	if first := t.answered.Load(); first != 0 && errors.Is(err, sip.ErrTransactionTerminated) &&
		time.Duration(now-first) < answerWindow() {
		return t.s.srv.WriteResponse(res)
	}
	return err
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
	method := sip.RequestMethod("")
	if stx, ok := tx.(*sip.ServerTx); ok {
		method = stx.Origin().Method
	}
	return s.wrapTx(tx, method)
}

// wrapTx wraps tx, a transaction of method.
func (s *Server) wrapTx(tx sip.ServerTransaction, method sip.RequestMethod) serverTx {
	st := serverTx{ServerTransaction: tx, s: s}
	if method == sip.INVITE {
		st.answered = new(atomic.Int64)
	}
	return st
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
