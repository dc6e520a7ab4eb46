package sipcore_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
)

// sipRequest builds a request from local with the given start-line version and
// body.
func sipRequest(method, version, branch string, local netip.AddrPort, body string) []byte {
	return []byte(fmt.Sprintf("%s sip:pbx@127.0.0.1 %s\r\n"+
		"Via: SIP/2.0/UDP %s;rport;branch=z9hG4bK%s\r\n"+
		"From: <sip:probe@127.0.0.1>;tag=1\r\nTo: <sip:pbx@127.0.0.1>\r\n"+
		"Call-ID: %s\r\nCSeq: 1 %s\r\nMax-Forwards: 70\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s",
		method, version, local, branch, branch, method, len(body), body))
}

// send writes msg from c to the server and returns the answer, or "" when
// none came within wait.
func send(t *testing.T, c *net.UDPConn, to netip.AddrPort, msg []byte, wait time.Duration) string {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(msg, to); err != nil {
		t.Fatal(err)
	}
	return receive(t, c, to, wait)
}

func receive(t *testing.T, c *net.UDPConn, from netip.AddrPort, wait time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65536)
	for {
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return ""
		}
		if src != from {
			t.Errorf("answer from %v, want the listener %v", src, from)
		}
		if !strings.HasPrefix(string(buf[:n]), "SIP/2.0 100 ") {
			return string(buf[:n])
		}
	}
}

func local(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

func udpServer(t testing.TB, opts sipcore.Options, setup ...func(*sipcore.Server)) (*sipcore.Server, netip.AddrPort) {
	t.Helper()
	opts.Listeners = []sipcore.Listener{{ID: "main", Transport: "udp", BindHost: "127.0.0.1"}}
	s := run(t, opts, setup...)
	addr, _ := s.Addr("main")
	return s, addr
}

func statusOf(res string) string {
	line, _, _ := strings.Cut(res, "\r\n")
	return line
}

func TestWrongSIPVersionAnswered505(t *testing.T) {
	s, addr := udpServer(t, sipcore.Options{})
	c := udpClient(t)
	for i, v := range []string{"SIP/3.0", "SIP/1.0"} {
		res := send(t, c, addr, sipRequest("OPTIONS", v, fmt.Sprintf("v%d", i), local(c), ""), 5*time.Second)
		if statusOf(res) != "SIP/2.0 505 Version Not Supported" {
			t.Fatalf("%s: answer %q", v, statusOf(res))
		}
		if !strings.Contains(res, "Server: pbx") {
			t.Fatalf("505 without Server header:\n%s", res)
		}
	}
	if got := s.Stats().VersionRejected; got != 2 {
		t.Fatalf("VersionRejected = %d, want 2", got)
	}
	// SIP/2.0 is still served.
	if res := send(t, c, addr, sipRequest("OPTIONS", "SIP/2.0", "v2", local(c), ""), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
		t.Fatalf("SIP/2.0 answer %q", statusOf(res))
	}
}

func TestOversizeDatagramAnswered513OrDropped(t *testing.T) {
	s, addr := udpServer(t, sipcore.Options{})
	c := udpClient(t)
	big := strings.Repeat("x", sipcore.UDPMaxMessage)
	res := send(t, c, addr, sipRequest("MESSAGE", "SIP/2.0", "big1", local(c), big), 5*time.Second)
	if statusOf(res) != "SIP/2.0 513 Message Too Large" || !strings.Contains(res, "CSeq: 1 MESSAGE") {
		t.Fatalf("answer %q", res)
	}
	// Just under the limit the request reaches the stack (405: no handler).
	fill := sipcore.UDPMaxMessage - len(sipRequest("MESSAGE", "SIP/2.0", "big2", local(c), "0000"))
	fit := sipRequest("MESSAGE", "SIP/2.0", "big2", local(c), strings.Repeat("x", fill))
	if res := send(t, c, addr, fit, 5*time.Second); statusOf(res) != "SIP/2.0 405 Method Not Allowed" {
		t.Fatalf("message of exactly %d bytes: %q", len(fit), statusOf(res))
	}
	// Oversize garbage has no headers to answer with: dropped and counted.
	if res := send(t, c, addr, []byte(strings.Repeat("y", 9000)), 300*time.Millisecond); res != "" {
		t.Fatalf("garbage answered %q", res)
	}
	st := s.Stats()
	if st.TooLarge != 1 || st.TooLargeDropped != 1 {
		t.Fatalf("TooLarge %d TooLargeDropped %d, want 1 and 1", st.TooLarge, st.TooLargeDropped)
	}
}

// TestTransactionCapRefused503: with a cap of 3, a fourth transaction from
// a new source is refused 503 with Retry-After; a source that got a 2xx
// (a phone that authenticated) may use the reserve (a quarter of the cap, here
// one) and is refused after it; retransmissions of open transactions and
// keep-alive OPTIONS are still answered.
func TestTransactionCapRefused503(t *testing.T) {
	s, addr := udpServer(t, sipcore.Options{MaxServerTransactions: 3}, func(s *sipcore.Server) {
		s.Handle(sip.MESSAGE, func(req *sip.Request, tx sip.ServerTransaction) {
			_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil))
		})
	})
	known, stranger := udpClient(t), udpClient(t)
	for i := range 3 {
		if res := send(t, known, addr, sipRequest("MESSAGE", "SIP/2.0", fmt.Sprintf("cap%d", i), local(known), "hi"), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
			t.Fatalf("MESSAGE %d under the cap: %q", i, statusOf(res))
		}
	}
	// A UDP non-INVITE transaction lingers 32 s after its answer: 3 open.
	if n := s.Stats().OpenTransactions; n != 3 {
		t.Fatalf("OpenTransactions = %d, want 3", n)
	}
	res := send(t, stranger, addr, sipRequest("MESSAGE", "SIP/2.0", "cap3", local(stranger), "hi"), 5*time.Second)
	if statusOf(res) != "SIP/2.0 503 Service Unavailable" || !strings.Contains(res, "Retry-After: 10") {
		t.Fatalf("new source past the cap: %q", res)
	}
	if res := send(t, known, addr, sipRequest("MESSAGE", "SIP/2.0", "cap4", local(known), "hi"), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
		t.Fatalf("known source within the reserve: %q", statusOf(res))
	}
	if res := send(t, known, addr, sipRequest("MESSAGE", "SIP/2.0", "cap5", local(known), "hi"), 5*time.Second); statusOf(res) != "SIP/2.0 503 Service Unavailable" {
		t.Fatalf("known source past the reserve: %q", statusOf(res))
	}
	// A retransmission of an open transaction is still answered by it.
	if res := send(t, known, addr, sipRequest("MESSAGE", "SIP/2.0", "cap0", local(known), "hi"), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
		t.Fatalf("retransmission past the cap: %q", statusOf(res))
	}
	// Keep-alive OPTIONS need no transaction and are answered regardless.
	if res := send(t, stranger, addr, sipRequest("OPTIONS", "SIP/2.0", "capo", local(stranger), ""), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
		t.Fatalf("OPTIONS past the cap: %q", statusOf(res))
	}
	st := s.Stats()
	if st.RefusedOverCap != 2 || st.OpenTransactions != 4 {
		t.Fatalf("RefusedOverCap %d OpenTransactions %d, want 2 and 4", st.RefusedOverCap, st.OpenTransactions)
	}
}

func TestOptionsAnsweredStatelesslyWithStableTag(t *testing.T) {
	s, addr := udpServer(t, sipcore.Options{})
	c := udpClient(t)
	msg := sipRequest("OPTIONS", "SIP/2.0", "stable", local(c), "")
	first := send(t, c, addr, msg, 5*time.Second)
	again := send(t, c, addr, msg, 5*time.Second)
	tag := func(res string) string {
		for _, l := range strings.Split(res, "\r\n") {
			if strings.HasPrefix(l, "To:") {
				_, v, _ := strings.Cut(l, "tag=")
				return v
			}
		}
		return ""
	}
	if tag(first) == "" || tag(first) != tag(again) {
		t.Fatalf("To tags %q and %q", tag(first), tag(again))
	}
	// rport is filled in from the packet's source.
	if want := fmt.Sprintf("rport=%d", local(c).Port()); !strings.Contains(first, want) {
		t.Fatalf("no %s in\n%s", want, first)
	}
	if st := s.Stats(); st.StatelessOptions != 2 || st.OpenTransactions != 0 {
		t.Fatalf("StatelessOptions %d OpenTransactions %d", st.StatelessOptions, st.OpenTransactions)
	}
}

// sourceIP is the i-th distinct loopback address past 127.0.0.1 (Linux
// routes all of 127.0.0.0/8 to lo).
func sourceIP(i int) net.IP { return net.IPv4(127, 10+byte(i>>16), byte(i>>8), byte(i)+1) }

func TestManySourcesKeepBoundedState(t *testing.T) {
	// Small generations and large batches make generations turn over while
	// datagrams wait in the queue.
	const generation, sources, batch = 50, 3000, 500
	t.Cleanup(sipcore.SetUDPGenerations(generation, time.Second))
	s, addr := udpServer(t, sipcore.Options{})
	answered := 0
	for start := 0; start < sources; start += batch {
		conns := make([]*net.UDPConn, 0, batch)
		for i := start; i < start+batch; i++ {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: sourceIP(i)})
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			// REGISTER reaches the stack (405 here: no handler), so
			// sipgo sees every source.
			if _, err := c.WriteToUDPAddrPort(sipRequest("REGISTER", "SIP/2.0", fmt.Sprintf("m%d", i), local(c), ""), addr); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range conns {
			if strings.HasPrefix(receive(t, c, addr, 5*time.Second), "SIP/2.0 405 ") {
				answered++
			}
			c.Close()
		}
	}
	if answered != sources {
		t.Fatalf("%d of %d sources answered; stats %+v", answered, sources, s.Stats())
	}
	// Retired generations release their addresses after the grace; the
	// current one holds at most a generation's worth (plus the listener).
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().UDPPoolEntries > generation+1 {
		if time.Now().After(deadline) {
			t.Fatalf("UDP pool holds %d addresses after %d sources, want at most %d", s.Stats().UDPPoolEntries, sources, generation+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The PBX's own requests still leave from the listening socket.
	peer := udpClient(t)
	ep, err := s.Endpoint("udp", "")
	if err != nil {
		t.Fatal(err)
	}
	req := sip.NewRequest(sip.OPTIONS, sip.Uri{Scheme: "sip", Host: "127.0.0.1", Port: int(local(peer).Port())})
	if err := ep.Client.WriteRequest(req); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	_, from, err := peer.ReadFromUDPAddrPort(buf)
	if err != nil || from != addr {
		t.Fatalf("PBX request from %v (%v), want the listener %v", from, err, addr)
	}
}

func TestWrongSIPVersionOverTCPAnswered505(t *testing.T) {
	s := run(t, sipcore.Options{Listeners: []sipcore.Listener{{ID: "t", Transport: "tcp", BindHost: "127.0.0.1"}}})
	addr, _ := s.Addr("t")
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	msg := strings.Replace(string(sipRequest("OPTIONS", "SIP/3.0", "tcpv", local, "")), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := statusOf(string(buf[:n])); got != "SIP/2.0 505 Version Not Supported" {
		t.Fatalf("answer %q", got)
	}
	// Counted once the answer is sent, which may be just after it arrived.
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().VersionRejected != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("VersionRejected = %d", s.Stats().VersionRejected)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRegisterRetransmissionAfterRelease: a REGISTER over UDP is answered
// without a transaction, and a retransmission is absorbed by the cache:
// answered with the same 200, without calling the handler again.
func TestRegisterRetransmissionAfterRelease(t *testing.T) {
	var calls atomic.Int32
	s, addr := udpServer(t, sipcore.Options{}, func(s *sipcore.Server) {
		s.Handle(sip.REGISTER, func(req *sip.Request, tx sip.ServerTransaction) {
			calls.Add(1)
			res := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)
			res.AppendHeader(sip.NewHeader("Contact", "<sip:probe@127.0.0.1>;expires=600"))
			_ = tx.Respond(res)
		})
	})
	c := udpClient(t)
	msg := sipRequest("REGISTER", "SIP/2.0", "rel", local(c), "")
	first := send(t, c, addr, msg, 5*time.Second)
	if statusOf(first) != "SIP/2.0 200 OK" {
		t.Fatalf("REGISTER: %q", first)
	}
	for i := range 3 {
		again := send(t, c, addr, msg, 5*time.Second)
		if again != first {
			t.Fatalf("retransmission %d answered\n%s\nnot\n%s", i, again, first)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
	st := s.Stats()
	if st.OpenTransactions != 0 || st.CachedRegisters != 1 || st.RegisterRetransmissions != 3 || st.StatelessRegister != 1 {
		t.Fatalf("OpenTransactions %d CachedRegisters %d RegisterRetransmissions %d StatelessRegister %d, want 0, 1, 3, 1",
			st.OpenTransactions, st.CachedRegisters, st.RegisterRetransmissions, st.StatelessRegister)
	}
}

// TestRegisterRetransmissionWhileHandled: a retransmission that arrives
// while the handler still works is absorbed (the handler runs once, one
// answer goes out), and one after the answer gets it; once two lingers
// passed the cache is empty and the same REGISTER is handled anew.
func TestRegisterRetransmissionWhileHandled(t *testing.T) {
	t.Cleanup(sipcore.SetRegisterLinger(time.Second))
	var calls atomic.Int32
	release := make(chan struct{})
	s, addr := udpServer(t, sipcore.Options{}, func(s *sipcore.Server) {
		s.Handle(sip.REGISTER, func(req *sip.Request, tx sip.ServerTransaction) {
			if calls.Add(1) == 1 {
				<-release
			}
			_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil))
		})
	})
	c := udpClient(t)
	msg := sipRequest("REGISTER", "SIP/2.0", "slow", local(c), "")
	if res := send(t, c, addr, msg, 100*time.Millisecond); res != "" {
		t.Fatalf("answered before the handler: %q", res)
	}
	if res := send(t, c, addr, msg, 100*time.Millisecond); res != "" {
		t.Fatalf("retransmission while handled answered: %q", res)
	}
	close(release)
	first := receive(t, c, addr, 5*time.Second)
	if statusOf(first) != "SIP/2.0 200 OK" {
		t.Fatalf("answer %q", first)
	}
	if res := receive(t, c, addr, 100*time.Millisecond); res != "" {
		t.Fatalf("second answer %q", res)
	}
	if again := send(t, c, addr, msg, 5*time.Second); again != first {
		t.Fatalf("retransmission answered\n%s\nnot\n%s", again, first)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().CachedRegisters != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d answers still cached", s.Stats().CachedRegisters)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res := send(t, c, addr, msg, 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" || calls.Load() != 2 {
		t.Fatalf("after the cache emptied: %q, handler called %d times", statusOf(res), calls.Load())
	}
}

// TestRegisterShedWhenBehind: while the REGISTER workers are stuck and
// their queue is full, a new REGISTER is answered 503 with Retry-After at
// once rather than queued; the ones queued are answered once the workers
// go on.
func TestRegisterShedWhenBehind(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	s, addr := udpServer(t, sipcore.Options{}, func(s *sipcore.Server) {
		s.Handle(sip.REGISTER, func(req *sip.Request, tx sip.ServerTransaction) {
			calls.Add(1)
			<-release
			_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil))
		})
	})
	c := udpClient(t)
	_ = c.SetReadBuffer(4 << 20)
	queued := 0
	for i := 0; ; i++ {
		if _, err := c.WriteToUDPAddrPort(sipRequest("REGISTER", "SIP/2.0", fmt.Sprintf("behind%d", i), local(c), ""), addr); err != nil {
			t.Fatal(err)
		}
		if res := receive(t, c, addr, time.Millisecond); res != "" {
			if statusOf(res) != "SIP/2.0 503 Service Unavailable" || !strings.Contains(res, "Retry-After: 10") {
				t.Fatalf("REGISTER %d while behind: %q", i, res)
			}
			break
		}
		queued++
		if queued > 2*sipcore.RegisterBacklog {
			t.Fatalf("%d REGISTERs queued without a 503", queued)
		}
	}
	if queued < sipcore.RegisterBacklog/2 {
		t.Fatalf("503 after %d REGISTERs, want about %d", queued, sipcore.RegisterBacklog)
	}
	close(release)
	// On a busy machine a 503 may arrive after the next REGISTER left:
	// every one sent is answered once, 200 when handled, else 503.
	ok, refused := 0, 1
	for {
		res := statusOf(receive(t, c, addr, 2*time.Second))
		if res == "SIP/2.0 200 OK" {
			ok++
		} else if res == "SIP/2.0 503 Service Unavailable" {
			refused++
		} else {
			break
		}
	}
	if ok+refused != queued+1 || int(calls.Load()) != ok || s.Stats().RefusedOverCap != uint64(refused) {
		t.Fatalf("%d sent, %d answered 200, %d 503, handler called %d times, RefusedOverCap %d",
			queued+1, ok, refused, calls.Load(), s.Stats().RefusedOverCap)
	}
}

// TestRegisterShedWhenFull: with a cap of 3, a fourth REGISTER while three
// answers are cached is answered 503 with Retry-After at once, without
// reaching the handler.
func TestRegisterShedWhenFull(t *testing.T) {
	var calls atomic.Int32
	s, addr := udpServer(t, sipcore.Options{MaxServerTransactions: 3}, func(s *sipcore.Server) {
		s.Handle(sip.REGISTER, func(req *sip.Request, tx sip.ServerTransaction) {
			calls.Add(1)
			_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil))
		})
	})
	c := udpClient(t)
	for i := range 3 {
		if res := send(t, c, addr, sipRequest("REGISTER", "SIP/2.0", fmt.Sprintf("full%d", i), local(c), ""), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
			t.Fatalf("REGISTER %d: %q", i, statusOf(res))
		}
	}
	res := send(t, c, addr, sipRequest("REGISTER", "SIP/2.0", "full3", local(c), ""), 5*time.Second)
	if statusOf(res) != "SIP/2.0 503 Service Unavailable" || !strings.Contains(res, "Retry-After: 10") {
		t.Fatalf("REGISTER past the cap: %q", res)
	}
	if st := s.Stats(); calls.Load() != 3 || st.RefusedOverCap != 1 || st.CachedRegisters != 3 {
		t.Fatalf("handler called %d times, RefusedOverCap %d, CachedRegisters %d", calls.Load(), st.RefusedOverCap, st.CachedRegisters)
	}
}
