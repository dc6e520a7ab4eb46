package sipcore

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"
)

// A UDP listener is served by the PBX's own readers rather than by handing
// the socket to sipgo, for two reasons:
//
//   - sipgo's UDP reader adds every source address it sees to the
//     transport's connection pool and to a map of its own that is only
//     emptied when the reader stops (about 110 bytes per address, forever):
//     a flood from spoofed sources grows them without bound. Here sipgo reads
//     from a generation, a net.PacketConn fed by the readers; after
//     udpGenerationSources source changes a new generation takes over and the
//     old one stops after udpRetireGrace, which makes sipgo delete the
//     addresses it added (it keeps entries another generation replaced). The
//     grace leaves the pool entries of the last requests in place while their
//     transactions look up the connection to answer on. Every generation
//     writes through the listening socket, so responses, the rport answer and
//     the PBX's own requests (sent from the listener's address) leave from
//     the port phones know.
//   - Answers that need no transaction are sent by the readers themselves,
//     before any per-request state exists: 505 for a SIP version other than
//     2.0, 513 for a datagram over UDPMaxMessage, 503 past the transaction
//     cap, and 200 to an out-of-dialog OPTIONS (a keep-alive probe; answered
//     statelessly as Kamailio and Asterisk do, RFC 3261 8.2.7), the commonest
//     flood. REGISTER is handled without a transaction too (udpregister.go).
var (
	// udpReaders is the number of goroutines reading one UDP socket.
	udpReaders = min(max(runtime.GOMAXPROCS(0), 2), 4)
	// udpGenerationSources is how many changes of source address one
	// generation of sipgo's reader sees before a new one replaces it. With
	// udpRetireGrace it bounds the addresses sipgo remembers.
	udpGenerationSources = 8192
	// udpRetireGrace is how long a replaced generation keeps its addresses.
	udpRetireGrace = 4 * time.Second
)

const (
	// udpQueueLen bounds the datagrams waiting for sipgo; past it a datagram
	// is dropped and counted (the sender retransmits).
	udpQueueLen = 2048
	// udpReadBuffer holds the largest UDP datagram, so that one over
	// UDPMaxMessage is seen whole and answered 513.
	udpReadBuffer = 1 << 16
	// udpReadErrorBackoff spaces reads after an error other than the socket
	// closing, so a persistent error cannot spin a core.
	udpReadErrorBackoff = 5 * time.Millisecond
	sipVersion          = "SIP/2.0"
)

// udpPacket is one datagram queued for sipgo.
type udpPacket struct {
	data []byte
	src  netip.AddrPort
}

// udpListener serves one bound UDP socket.
type udpListener struct {
	s     *Server
	conn  *net.UDPConn
	laddr string
	queue chan udpPacket
	// registers feeds the workers running the REGISTER handler.
	registers chan registerJob
	closed    chan struct{} // closed once the readers stopped
	gens      sync.WaitGroup
}

// serveUDP reads b's socket until it is closed.
func (s *Server) serveUDP(b *bound) error {
	u := &udpListener{
		s:         s,
		conn:      b.udp,
		laddr:     b.udp.LocalAddr().String(),
		queue:     make(chan udpPacket, udpQueueLen),
		registers: make(chan registerJob, registerQueueLen),
		closed:    make(chan struct{}),
	}
	u.startGeneration()
	var workers sync.WaitGroup
	for range registerWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			u.runRegisters()
		}()
	}
	var wg sync.WaitGroup
	for range udpReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.read()
		}()
	}
	wg.Wait()
	close(u.registers)
	workers.Wait()
	close(u.closed)
	u.gens.Wait()
	return nil
}

// read handles datagrams until the socket is closed. Any other read error
// is counted and reading goes on: nothing a peer sends stops the listener.
func (u *udpListener) read() {
	buf := make([]byte, udpReadBuffer)
	for {
		n, src, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			u.s.stats.readErrors.Add(1)
			u.s.log.Debug("udp read", "listener", u.laddr, "err", err)
			time.Sleep(udpReadErrorBackoff)
			continue
		}
		u.handle(buf[:n], src)
	}
}

// handle admits, answers statelessly or queues one datagram for sipgo.
func (u *udpListener) handle(data []byte, src netip.AddrPort) {
	if len(bytes.Trim(data, "\x00")) == 0 {
		return
	}
	if admit := u.s.opts.Admit; admit != nil && !admit(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), TransportUDP, data) {
		return
	}
	if len(data) <= 4 && len(bytes.Trim(data, "\r\n")) == 0 {
		return // keep-alive
	}
	if len(data) > UDPMaxMessage {
		u.tooLarge(data, src)
		return
	}
	line := firstLine(data)
	if bytes.HasPrefix(line, []byte("SIP/")) {
		if !bytes.HasPrefix(line, []byte(sipVersion+" ")) {
			u.s.stats.badVersionDropped.Add(1) // a response: nothing to answer
			return
		}
		u.enqueue(data, src)
		return
	}
	if v := requestVersion(line); v != nil && !bytes.EqualFold(v, []byte(sipVersion)) {
		u.versionNotSupported(data, src)
		return
	}
	if bytes.HasPrefix(data, []byte("OPTIONS ")) && u.options(data, src) {
		return
	}
	if bytes.HasPrefix(data, []byte("BYE ")) && u.strayBye(data, src) {
		return
	}
	if u.s.txs.full() && u.refuseOverCap(data, src) {
		return
	}
	if bytes.HasPrefix(data, []byte("REGISTER ")) && u.statelessRegister(data, src) {
		return
	}
	u.enqueue(data, src)
}

// enqueue hands a copy of data to sipgo, or drops it when sipgo is behind.
func (u *udpListener) enqueue(data []byte, src netip.AddrPort) {
	select {
	case u.queue <- udpPacket{data: bytes.Clone(data), src: src}:
	default:
		u.s.stats.queueDropped.Add(1)
	}
}

// firstLine is data up to its first line end.
func firstLine(data []byte) []byte {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	}
	return bytes.TrimSuffix(data, []byte("\r"))
}

// requestVersion is the SIP-Version of a Request-Line, or nil when line does
// not end in one (sipgo then rejects the message as malformed).
func requestVersion(line []byte) []byte {
	i := bytes.LastIndexByte(line, ' ')
	if i < 0 {
		return nil
	}
	v := line[i+1:]
	if len(v) < 4 || !bytes.EqualFold(v[:4], []byte("SIP/")) {
		return nil
	}
	return v
}

// parseRequest parses the headers of a request well enough to answer it:
// a response needs Via, From, To, Call-ID and CSeq. The body is not read.
func (u *udpListener) parseRequest(data []byte, src netip.AddrPort) (*sip.Request, bool) {
	msg, _, err := u.s.parser.ParseHeaders(data, false)
	if err != nil {
		return nil, false
	}
	req, ok := msg.(*sip.Request)
	if !ok || req.Via() == nil || req.From() == nil || req.To() == nil || req.CallID() == nil || req.CSeq() == nil {
		return nil, false
	}
	req.SetTransport("UDP")
	req.SetSource(src.String())
	return req, true
}

// reply sends res, built from req, statelessly to where req's answer goes.
func (u *udpListener) reply(req *sip.Request, res *sip.Response, src netip.AddrPort) {
	res.SipVersion = sipVersion
	u.s.DecorateResponse(res)
	if _, err := u.conn.WriteToUDPAddrPort(ResponseBytes(res), replyAddr(req, src)); err != nil {
		u.s.log.Debug("udp stateless reply", "status", res.StatusCode, "err", err)
	}
}

// replyAddr is where a response to req goes over UDP, as sipgo sends one
// (RFC 3261 18.2.2, RFC 3581 4): the packet's source address, at its
// source port when the top Via asks for rport, else at the Via port.
func replyAddr(req *sip.Request, src netip.AddrPort) netip.AddrPort {
	via := req.Via()
	if rport, ok := via.Params.Get("rport"); ok && rport == "" {
		return src
	}
	port := uint16(sip.DefaultUdpPort)
	if via.Port > 0 && via.Port <= 65535 {
		port = uint16(via.Port)
	}
	return netip.AddrPortFrom(src.Addr(), port)
}
