package sipcore

import (
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
)

// REGISTER over UDP is answered without a sipgo transaction, as Kamailio
// answers it: the readers parse it and hand it to a few workers that run the
// REGISTER handler; the final response goes out at once and its bytes stay
// in a retransmission cache (registerCache) for CompletedLinger, so a
// retransmitted REGISTER gets the same answer again (RFC 3261 17.2.2) and
// one still being handled is absorbed. A sipgo server transaction kept the
// parsed request, the parsed response, two timers and a map entry (about
// 3.5 kB) for as long; the cache keeps the response's bytes and its key,
// and is dropped a generation at a time, so its memory goes back when a
// load ends (sipgo's transaction map keeps the size of its largest load).
// When the workers are behind or the cache is full, a new REGISTER is
// answered 503 with Retry-After at once instead of waiting in a queue.
// registerLinger is how long a REGISTER's answer stays cached at least
// (at most twice that); a variable for the tests.
var registerLinger = CompletedLinger

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
		t.u.s.registers.finish(t.key, b, dst)
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

// registerCache keeps the final response of each REGISTER answered over UDP
// for between one and two registerLinger periods, in two generations: a
// new entry goes into the current one, and every period the previous
// generation is dropped whole and the current one takes its place.
type registerCache struct {
	max    int
	linger time.Duration // registerLinger when the cache was made
	mu     sync.Mutex
	cur    map[string]*cachedResponse
	prev   map[string]*cachedResponse
	timer  *time.Timer // rotates while entries remain
}

// cachedResponse is a REGISTER's final response (nil while it is handled)
// and where it went.
type cachedResponse struct {
	res []byte
	dst netip.AddrPort
}

func newRegisterCache(max int) *registerCache {
	return &registerCache{max: max, linger: registerLinger, cur: map[string]*cachedResponse{}}
}

// begin looks key up: seen reports a REGISTER already handled or being
// handled (res is its response, nil while it is handled); otherwise the
// REGISTER is recorded as being handled, unless the cache is full of
// REGISTERs of the current generation (full: the older one is dropped early
// instead when that makes room).
func (c *registerCache) begin(key string) (res []byte, dst netip.AddrPort, seen, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cur[key]
	if !ok {
		e, ok = c.prev[key]
	}
	if ok {
		return e.res, e.dst, true, false
	}
	if len(c.cur)+len(c.prev) >= c.max {
		if len(c.prev) == 0 || len(c.cur) >= c.max {
			return nil, netip.AddrPort{}, false, true
		}
		// Room goes to the new REGISTER before the older generation's
		// answers: they were kept at least one linger, and a retransmission
		// of one of them is merely handled anew. Shedding a REGISTER the
		// workers have time for because the cache of answered ones is
		// full would refuse service at a rate the PBX sustains.
		c.prev = nil
	}
	c.cur[key] = &cachedResponse{}
	if c.timer == nil {
		c.timer = time.AfterFunc(c.linger, c.rotate)
	}
	return nil, netip.AddrPort{}, false, false
}

// finish keeps the final response of key.
func (c *registerCache) finish(key string, res []byte, dst netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cur[key]
	if !ok {
		e, ok = c.prev[key]
	}
	if ok {
		e.res, e.dst = res, dst
	}
}

// forget drops key.
func (c *registerCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, key)
	delete(c.prev, key)
}

// rotate drops the previous generation; it runs every registerLinger
// while entries remain.
func (c *registerCache) rotate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, map[string]*cachedResponse{}
	if len(c.prev) == 0 {
		c.prev = nil
		c.timer = nil
		return
	}
	c.timer = time.AfterFunc(c.linger, c.rotate)
}

// size is the number of REGISTERs cached or being handled.
func (c *registerCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}
