package sipcore_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/sipcore"
)

// tcpServer runs a server with one TCP listener on 127.0.0.1.
func tcpServer(t *testing.T, opts sipcore.Options) (*sipcore.Server, netip.AddrPort) {
	t.Helper()
	opts.Listeners = []sipcore.Listener{{ID: "tcp", Transport: "tcp", BindHost: "127.0.0.1"}, {ID: "udp", Transport: "udp", BindHost: "127.0.0.1"}}
	s := run(t, opts)
	addr, _ := s.Addr("tcp")
	return s, addr
}

// dialFrom opens a TCP connection to addr from the loopback address from
// (127.0.0.2 and up stand for other hosts).
func dialFrom(t *testing.T, from string, addr netip.AddrPort) *net.TCPConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func tcpOptions(branch string, c net.Conn) []byte {
	return []byte(fmt.Sprintf("OPTIONS sip:pbx@127.0.0.1 SIP/2.0\r\n"+
		"Via: SIP/2.0/TCP %s;branch=z9hG4bK%s\r\n"+
		"From: <sip:probe@127.0.0.1>;tag=1\r\nTo: <sip:pbx@127.0.0.1>\r\n"+
		"Call-ID: %s\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n", c.LocalAddr(), branch, branch))
}

// readResponse reads one SIP message from r: headers, then Content-Length bytes.
func readResponse(t *testing.T, c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var b strings.Builder
	length := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		if line == "\r\n" && b.Len() == 0 {
			continue // keep-alive pong
		}
		b.WriteString(line)
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "content-length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return b.String(), err
	}
	return b.String() + string(body), nil
}

// dialRefused fails unless a connection from from to addr is refused: the
// dial fails (the reset came first) or the server closes it at once.
func dialRefused(t *testing.T, from string, addr netip.AddrPort) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		return
	}
	defer c.Close()
	waitClosed(t, c, 5*time.Second)
}

// waitClosed fails unless the server closes c within d; it returns how long
// that took.
func waitClosed(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection still open after %s", d)
		}
		return time.Since(start)
	}
}

// stillOpen fails unless an OPTIONS on c is answered 200.
func stillOpen(t *testing.T, c net.Conn, branch string) {
	t.Helper()
	if _, err := c.Write(tcpOptions(branch, c)); err != nil {
		t.Fatalf("write: %v", err)
	}
	res, err := readResponse(t, c, bufio.NewReader(c), 5*time.Second)
	if err != nil || !strings.HasPrefix(res, "SIP/2.0 200 ") {
		t.Fatalf("OPTIONS on an open connection: %q, %v", res, err)
	}
}

// waitStats polls the server's TCP counters until ok holds.
func waitStats(t *testing.T, s *sipcore.Server, what string, ok func(sipcore.TCPStats) bool) sipcore.TCPStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := s.TCPStats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTCPCapsPerSourceAndTotal: past MaxPerSource from one address and past
// MaxConnections in total, connections are closed at once and counted; the
// ones within the caps keep working, and a freed slot is taken again.
func TestTCPCapsPerSourceAndTotal(t *testing.T) {
	s, addr := tcpServer(t, sipcore.Options{TCP: sipcore.TCPOptions{MaxConnections: 5, MaxPerSource: 3}})
	var a []*net.TCPConn
	for i := 0; i < 3; i++ {
		a = append(a, dialFrom(t, "127.0.0.1", addr))
	}
	waitStats(t, s, "three from .1 accepted", func(st sipcore.TCPStats) bool { return st.Open == 3 })
	dialRefused(t, "127.0.0.1", addr)
	st := waitStats(t, s, "fourth from .1 refused", func(st sipcore.TCPStats) bool { return st.RefusedSource == 1 })
	if st.Open != 3 || st.RefusedTotal != 0 {
		t.Fatalf("after the per-source refusal: %+v", st)
	}

	b1, b2 := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)
	waitStats(t, s, "two from .2 accepted", func(st sipcore.TCPStats) bool { return st.Open == 5 })
	dialRefused(t, "127.0.0.3", addr)
	st = waitStats(t, s, "one from .3 refused", func(st sipcore.TCPStats) bool { return st.RefusedTotal == 1 })
	if st.Open != 5 || st.RefusedSource != 1 || st.Accepted != 5 {
		t.Fatalf("after the total refusal: %+v", st)
	}
	for i, conn := range append(a, b1, b2) {
		stillOpen(t, conn, "cap"+strconv.Itoa(i))
	}

	a[0].Close()
	waitStats(t, s, "slot freed", func(st sipcore.TCPStats) bool { return st.Open == 4 })
	stillOpen(t, dialFrom(t, "127.0.0.3", addr), "freed")
	if st := s.TCPStats(); st.Open != 5 || st.Accepted != 6 {
		t.Fatalf("freed slot not reused: %+v", st)
	}
}

// TestTCPIdleTimeout: a connection that sends nothing is closed after the
// idle timeout, not before; one that pings with CRLFCRLF gets CRLF pongs and
// stays.
func TestTCPIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	s, addr := tcpServer(t, sipcore.Options{TCP: sipcore.TCPOptions{IdleTimeout: idle}})
	dialled := time.Now()
	silent := dialFrom(t, "127.0.0.1", addr)
	closedAfter := make(chan time.Duration, 1)
	go func() {
		_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = silent.Read(make([]byte, 16))
		closedAfter <- time.Since(dialled)
	}()

	pinger := dialFrom(t, "127.0.0.1", addr)
	r := bufio.NewReader(pinger)
	period := time.NewTicker(idle / 3) // the client's keep-alive period
	defer period.Stop()
	for start := time.Now(); time.Since(start) < 3*idle; <-period.C {
		if _, err := pinger.Write([]byte("\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = pinger.SetReadDeadline(time.Now().Add(5 * time.Second))
		pong := make([]byte, 2)
		if _, err := io.ReadFull(r, pong); err != nil || string(pong) != "\r\n" {
			t.Fatalf("pong %q, %v", pong, err)
		}
	}
	if took := <-closedAfter; took < idle-10*time.Millisecond || took > idle+2*time.Second {
		t.Fatalf("silent connection closed %s after it opened; idle timeout %s", took, idle)
	}
	st := waitStats(t, s, "idle close counted", func(st sipcore.TCPStats) bool { return st.IdleClosed == 1 })
	if st.Open != 1 {
		t.Fatalf("the pinging connection should be the one open: %+v", st)
	}
	stillOpen(t, pinger, "pinger")
}

// TestTCPIncompleteMessageDeadline: headers without their blank line, or a
// body shorter than Content-Length, close the connection once the message
// deadline passes, even when the sender keeps dribbling bytes.
func TestTCPIncompleteMessageDeadline(t *testing.T) {
	const deadline = 400 * time.Millisecond
	s, addr := tcpServer(t, sipcore.Options{TCP: sipcore.TCPOptions{MessageTimeout: deadline}})

	headers := dialFrom(t, "127.0.0.1", addr)
	full := string(tcpOptions("half1", headers))
	if _, err := headers.Write([]byte(full[:len(full)-2])); err != nil {
		t.Fatal(err)
	}
	body := dialFrom(t, "127.0.0.1", addr)
	msg := strings.Replace(string(tcpOptions("half2", body)), "Content-Length: 0", "Content-Length: 10", 1) + "12345"
	if _, err := body.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	dribble := dialFrom(t, "127.0.0.1", addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = dribble.Write([]byte("OPTIONS sip:pbx@127.0.0.1 SIP/2.0\r\n"))
		for {
			select {
			case <-stop:
				return
			case <-time.After(deadline / 8):
			}
			if _, err := dribble.Write([]byte("X-Slow: 1\r\n")); err != nil {
				return
			}
		}
	}()
	for name, c := range map[string]net.Conn{"headers": headers, "body": body, "dribble": dribble} {
		if took := waitClosed(t, c, 10*deadline); took > 5*deadline {
			t.Errorf("%s: closed after %s", name, took)
		}
	}
	close(stop)
	wg.Wait()
	st := waitStats(t, s, "incomplete closes counted", func(st sipcore.TCPStats) bool { return st.IncompleteClosed == 3 })
	if st.Open != 0 || st.IdleClosed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// admitCounter counts admission calls per source port and refuses from the
// refuseAfter-th call of a source on (0: never).
type admitCounter struct {
	mu          sync.Mutex
	calls       map[uint16]int
	sizes       []int
	refuseAfter int
}

func (a *admitCounter) admit(src netip.AddrPort, transport string, packet []byte) bool {
	if transport != "tcp" {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls[src.Port()]++
	a.sizes = append(a.sizes, len(packet))
	return a.refuseAfter == 0 || a.calls[src.Port()] < a.refuseAfter
}

func (a *admitCounter) count(c net.Conn) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[uint16(c.LocalAddr().(*net.TCPAddr).Port)]
}

// TestTCPAdmitOncePerMessage: a message written a byte at a time is admitted
// once, whole, and answered; two messages in one write are admitted twice.
func TestTCPAdmitOncePerMessage(t *testing.T) {
	ac := &admitCounter{calls: map[uint16]int{}}
	s, addr := tcpServer(t, sipcore.Options{Admit: ac.admit})
	c := dialFrom(t, "127.0.0.1", addr)
	_ = c.SetNoDelay(true)
	msg := tcpOptions("tiny", c)
	for i := range msg {
		if _, err := c.Write(msg[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(c)
	res, err := readResponse(t, c, r, 5*time.Second)
	if err != nil || !strings.HasPrefix(res, "SIP/2.0 200 ") {
		t.Fatalf("response to a message in %d writes: %q, %v", len(msg), res, err)
	}
	if n := ac.count(c); n != 1 {
		t.Fatalf("admitted %d times, want 1", n)
	}
	if ac.sizes[0] != len(msg) {
		t.Fatalf("admitted %d bytes, want the whole message of %d", ac.sizes[0], len(msg))
	}

	two := append(append([]byte("\r\n\r\n"), tcpOptions("two1", c)...), tcpOptions("two2", c)...)
	if _, err := c.Write(two); err != nil {
		t.Fatal(err)
	}
	var both string // the stack answers concurrently, in either order
	for i := 0; i < 2; i++ {
		res, err := readResponse(t, c, r, 5*time.Second)
		if err != nil || !strings.HasPrefix(res, "SIP/2.0 200 ") {
			t.Fatalf("pipelined response %d: %q, %v", i+1, res, err)
		}
		both += res
	}
	if !strings.Contains(both, "z9hG4bKtwo1\r\n") || !strings.Contains(both, "z9hG4bKtwo2\r\n") {
		t.Fatalf("pipelined responses:\n%s", both)
	}
	if n := ac.count(c); n != 3 {
		t.Fatalf("admitted %d times after two more messages and a ping, want 3", n)
	}
	if st := s.TCPStats(); st.Throttled != 0 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTCPThrottledSourceClosedAtBoundary: when the hook refuses a message the
// connection closes without that message reaching the stack, and nothing
// after it is admitted.
func TestTCPThrottledSourceClosedAtBoundary(t *testing.T) {
	ac := &admitCounter{calls: map[uint16]int{}, refuseAfter: 2}
	s, addr := tcpServer(t, sipcore.Options{Admit: ac.admit})
	c := dialFrom(t, "127.0.0.1", addr)
	r := bufio.NewReader(c)
	if _, err := c.Write(tcpOptions("ok1", c)); err != nil {
		t.Fatal(err)
	}
	if res, err := readResponse(t, c, r, 5*time.Second); err != nil || !strings.Contains(res, "ok1") {
		t.Fatalf("first message: %q, %v", res, err)
	}
	burst := append(tcpOptions("refused", c), tcpOptions("after", c)...)
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	res, err := readResponse(t, c, r, 5*time.Second)
	if err == nil || res != "" {
		t.Fatalf("a refused message was answered: %q, %v", res, err)
	}
	waitStats(t, s, "throttle counted", func(st sipcore.TCPStats) bool { return st.Throttled == 1 && st.Open == 0 })
	if n := ac.count(c); n != 2 {
		t.Fatalf("admitted %d times, want 2 (nothing after the refusal)", n)
	}
}

// TestTCPOversizeAndMalformedClosed: a Content-Length that takes the message
// past TCPMaxMessage closes before the body arrives; a header section that
// never ends within the limit closes; a message without Content-Length or
// with a start line that is not SIP (an HTTP probe) closes. A message of
// exactly the limit is handled.
func TestTCPOversizeAndMalformedClosed(t *testing.T) {
	s, addr := tcpServer(t, sipcore.Options{})

	big := dialFrom(t, "127.0.0.1", addr)
	msg := strings.Replace(string(tcpOptions("big", big)), "Content-Length: 0", "Content-Length: "+strconv.Itoa(sipcore.TCPMaxMessage), 1)
	if _, err := big.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, big, 5*time.Second)

	endless := dialFrom(t, "127.0.0.1", addr)
	_, _ = endless.Write([]byte("OPTIONS sip:pbx@127.0.0.1 SIP/2.0\r\n"))
	line := []byte("X-Pad: " + strings.Repeat("a", 1000) + "\r\n")
	for sent := 0; sent <= sipcore.TCPMaxMessage; sent += len(line) {
		if _, err := endless.Write(line); err != nil {
			break // closed while writing: what is wanted
		}
	}
	waitClosed(t, endless, 5*time.Second)

	nolen := dialFrom(t, "127.0.0.1", addr)
	if _, err := nolen.Write([]byte(strings.Replace(string(tcpOptions("nolen", nolen)), "Content-Length: 0\r\n", "", 1))); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, nolen, 5*time.Second)

	probe := dialFrom(t, "127.0.0.1", addr)
	if _, err := probe.Write([]byte("GET / HTTP/1.1\r\nHost: pbx\r\nContent-Length: 0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, probe, 5*time.Second)

	st := waitStats(t, s, "closes counted", func(st sipcore.TCPStats) bool { return st.Oversize == 2 && st.Malformed == 2 })
	if st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}

	exact := dialFrom(t, "127.0.0.1", addr)
	head := string(tcpOptions("exact", exact))
	head = strings.Replace(head, "Content-Length: 0\r\n", "Content-Type: text/plain\r\nContent-Length: 00000\r\n", 1)
	bodyLen := sipcore.TCPMaxMessage - len(head)
	head = strings.Replace(head, "Content-Length: 00000", fmt.Sprintf("Content-Length: %05d", bodyLen), 1)
	if _, err := exact.Write([]byte(head + strings.Repeat("b", bodyLen))); err != nil {
		t.Fatal(err)
	}
	if res, err := readResponse(t, exact, bufio.NewReader(exact), 5*time.Second); err != nil || !strings.HasPrefix(res, "SIP/2.0 200 ") {
		t.Fatalf("message of exactly %d bytes: %q, %v", sipcore.TCPMaxMessage, res, err)
	}
}

// TestTCPHalfSentFlood: many connections each holding half a request are all
// closed within the message deadline (plus scheduling), and the listener
// keeps serving. It reports the figure.
func TestTCPHalfSentFlood(t *testing.T) {
	const n = 1024
	const deadline = 500 * time.Millisecond
	s, addr := tcpServer(t, sipcore.Options{TCP: sipcore.TCPOptions{MessageTimeout: deadline, MaxPerSource: n + 1, MaxConnections: n + 1}})
	conns := make([]net.Conn, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		c := dialFrom(t, "127.0.0.1", addr)
		full := tcpOptions("flood"+strconv.Itoa(i), c)
		if _, err := c.Write(full[:len(full)/2]); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	sent := time.Since(start)
	var wg sync.WaitGroup
	var slowest atomic.Int64
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			took := int64(time.Since(start))
			for {
				old := slowest.Load()
				if took <= old || slowest.CompareAndSwap(old, took) {
					break
				}
			}
		}()
	}
	wg.Wait()
	st := waitStats(t, s, "every half-sent request closed", func(st sipcore.TCPStats) bool { return st.IncompleteClosed == n && st.Open == 0 })
	last := time.Duration(slowest.Load())
	t.Logf("%d half-sent requests (sent in %s): all closed %s after the first was sent (deadline %s); stats %+v", n, sent.Round(time.Millisecond), last.Round(time.Millisecond), deadline, st)
	if last > sent+4*deadline+2*time.Second {
		t.Fatalf("last close after %s", last)
	}
	stillOpen(t, dialFrom(t, "127.0.0.2", addr), "after-flood")
}

// TestTCPOptionsValidated: negative limits and a per-source cap above the
// total are refused by New; a per-source cap alone is checked against the
// default total.
func TestTCPOptionsValidated(t *testing.T) {
	for _, o := range []sipcore.TCPOptions{
		{MaxPerSource: 100},
		{MaxConnections: 10},
	} {
		s, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "t", Transport: "tcp", BindHost: "127.0.0.1"}}, TCP: o}, nil)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		s.Close()
	}
	for _, o := range []sipcore.TCPOptions{
		{IdleTimeout: -1},
		{MaxConnections: -1},
		{MaxConnections: 10, MaxPerSource: 11},
		{MaxPerSource: sipcore.DefaultTCPMaxConnections + 1},
	} {
		_, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "t", Transport: "tcp", BindHost: "127.0.0.1"}}, TCP: o}, nil)
		if !errors.Is(err, sipcore.ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
}
