package sipcore

import (
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
)

// REGISTER over UDP is answered without a sipgo transaction, as Kamailio
// answers it: the readers parse it and hand it to a few workers that run the
// REGISTER handler; the final response goes out at once and its bytes stay
// in a retransmission cache (registerCache) for registerLinger, so a
// retransmitted REGISTER gets the same answer again (RFC 3261 17.2.2) and
// one still being handled is absorbed. A sipgo server transaction kept the
// parsed request, the parsed response, two timers and a map entry (about
// 3.5 kB) for as long; the cache keeps the response's bytes and a hash of
// its key (registercache.go), and is dropped a generation at a time, so
// its memory goes back when a load ends (sipgo's transaction map keeps the
// size of its largest load).
// When the workers are behind or the cache is full, a new REGISTER is
// answered 503 with Retry-After at once instead of waiting in a queue.

const (
	// registerWorkers run the REGISTER handler for one UDP listener.
	registerWorkers = 8
	// registerQueueLen bounds the REGISTERs waiting for a worker: about
	// 50 ms of work at 20,000 a second.
	registerQueueLen = 1024
)

// registerJob is one REGISTER waiting for a worker.
type registerJob struct {
	req *sip.Request
	src netip.AddrPort
	key string
}

// registerHandler returns the handler of REGISTER when one is set.
func (s *Server) registerHandler() sipgo.RequestHandler {
	if h := s.register.Load(); h != nil {
		return *h
	}
	return nil
}

// statelessRegister handles a REGISTER datagram without a sipgo transaction
// and reports whether it did (false: no REGISTER handler, the stack
// answers).
func (u *udpListener) statelessRegister(data []byte, src netip.AddrPort) bool {
	if u.s.registerHandler() == nil {
		return false
	}
	req, err := parseRegister(u.s.parser, data)
	if err != nil || req.Via() == nil || req.From() == nil || req.To() == nil || req.CallID() == nil || req.CSeq() == nil {
		u.s.stats.malformedDropped.Add(1)
		return true
	}
	req.SetTransport("UDP")
	req.SetSource(src.String())
	key, err := registerKey(req)
	if err != nil {
		u.s.stats.malformedDropped.Add(1)
		return true
	}
	res, dst, seen, full := u.s.registers.begin(key)
	switch {
	case seen:
		u.s.stats.registerRetransmissions.Add(1)
		if res != nil {
			u.write(res, dst)
		}
		return true
	case full:
		u.shed(req, src)
		return true
	}
	select {
	case u.registers <- registerJob{req: req, src: src, key: key}:
	default:
		u.s.registers.forget(key)
		u.shed(req, src)
	}
	return true
}

// registerKey is sip.ServerTxKeyMake(req) (branch, sent-by host and port,
// method: RFC 3261 17.2.3) built in one allocation of its size for an RFC
// 3261 branch (sipgo's builder grows several times).
func registerKey(req *sip.Request) (string, error) {
	via := req.Via()
	branch, _ := via.Params.Get("branch")
	if len(branch) <= len(sip.RFC3261BranchMagicCookie) || !strings.HasPrefix(branch, sip.RFC3261BranchMagicCookie) {
		return sip.ServerTxKeyMake(req)
	}
	port := via.Port
	if port <= 0 {
		port = sip.DefaultPort(via.Transport)
	}
	method := string(req.CSeq().MethodName)
	if method == string(sip.ACK) {
		method = string(sip.INVITE)
	}
	var digits [20]byte
	p := strconv.AppendInt(digits[:0], int64(port), 10)
	var b strings.Builder
	b.Grow(len(branch) + len(via.Host) + len(p) + len(method) + 3*len(sip.TxSeperator))
	b.WriteString(branch)
	b.WriteString(sip.TxSeperator)
	b.WriteString(via.Host)
	b.WriteString(sip.TxSeperator)
	b.Write(p)
	b.WriteString(sip.TxSeperator)
	b.WriteString(method)
	return b.String(), nil
}

// write sends bytes to dst from the listening socket.
func (u *udpListener) write(b []byte, dst netip.AddrPort) {
	if _, err := u.conn.WriteToUDPAddrPort(b, dst); err != nil {
		u.s.log.Debug("udp register reply", "err", err)
	}
}

// runRegisters runs the REGISTER handler for queued requests until the
// queue is closed.
func (u *udpListener) runRegisters() {
	h := u.s.registerHandler()
	for job := range u.registers {
		tx := &registerTx{u: u, req: job.req, src: job.src, key: job.key}
		h(job.req, tx)
		if !tx.final.Load() {
			u.s.registers.forget(job.key) // unanswered: a retransmission is handled anew
		}
	}
}

// registerTx is the ServerTransaction a REGISTER handler answers through
// when the REGISTER came over UDP: responses are sent at once, the final
// one is kept in the retransmission cache.
type registerTx struct {
	u     *udpListener
	req   *sip.Request
	src   netip.AddrPort
	key   string
	final atomic.Bool
}

// Respond sends res (with the Server header) and, when final, caches it
// for retransmissions; a 2xx marks the source as known.
func (t *registerTx) Respond(res *sip.Response) error {
	res.SipVersion = sipVersion
	t.u.s.DecorateResponse(res)
	b := ResponseBytes(res)
	dst := replyAddr(t.req, t.src)
	if res.StatusCode >= 200 && !t.final.Swap(true) {
		t.u.s.registers.finish(t.key, res.StatusCode, b, dst)
		if res.StatusCode < 300 {
			t.u.s.known.add(netip.AddrPortFrom(t.src.Addr().Unmap(), t.src.Port()))
		}
	}
	t.u.s.stats.statelessRegister.Add(1) // counted before the answer leaves
	if _, err := t.u.conn.WriteToUDPAddrPort(b, dst); err != nil {
		return err
	}
	return nil
}

// Acks never delivers: REGISTER has no ACK.
func (t *registerTx) Acks() <-chan *sip.Request { return nil }

// OnCancel reports false: a REGISTER cannot be cancelled here.
func (t *registerTx) OnCancel(sip.FnTxCancel) bool { return false }

// Terminate does nothing: the cache entry expires on its own.
func (t *registerTx) Terminate() {}

// OnTerminate reports false, as for a transaction already terminated.
func (t *registerTx) OnTerminate(sip.FnTxTerminate) bool { return false }

// Done is closed: nothing waits on the transaction.
func (t *registerTx) Done() <-chan struct{} { return closedChan }

// Err is nil.
func (t *registerTx) Err() error { return nil }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
