package sipcore

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first n accepts with EMFILE, as a process out of
// descriptors does.
type flakyListener struct {
	net.Listener
	fail atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func testLimits(opts TCPOptions) *tcpLimits {
	return newTCPLimits(opts.withDefaults(), nil, slog.New(slog.DiscardHandler))
}

// TestAcceptErrorsBackOffAndContinue: EMFILE from accept is retried after
// pauses doubling from 5 ms, counted, and the next connection is served;
// only closing the listener ends Accept, even during a pause.
func TestAcceptErrorsBackOffAndContinue(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyListener{Listener: inner}
	flaky.fail.Store(5)
	limits := testLimits(TCPOptions{})
	defer limits.stop()
	ln := newTCPListener(flaky, limits)
	defer ln.Close()

	client, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	start := time.Now()
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept returned %v after EMFILE", err)
	}
	defer c.Close()
	// Pauses 5+10+20+40+80 ms.
	if took := time.Since(start); took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("accept took %s, want the doubling pauses (155 ms)", took)
	}
	if st := limits.stats(); st.AcceptErrors != 5 || st.Accepted != 1 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}

	flaky.fail.Store(1 << 20)
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	for limits.stats().AcceptErrors < 10 {
		time.Sleep(time.Millisecond) // polling the counter
	}
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("accept after close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("accept did not return after the listener closed")
	}
}

// TestAcceptBackoffCapsAtOneSecond: the pause stops doubling at 1 s.
func TestAcceptBackoffCapsAtOneSecond(t *testing.T) {
	var d time.Duration
	var seen []time.Duration
	for i := 0; i < 12; i++ {
		d = min(max(2*d, acceptDelayMin), acceptDelayMax)
		seen = append(seen, d)
	}
	if seen[0] != 5*time.Millisecond || seen[1] != 10*time.Millisecond || seen[11] != time.Second {
		t.Fatalf("pauses %v", seen)
	}
}

func TestContentLength(t *testing.T) {
	for _, c := range []struct {
		hdr  string
		n    int
		ok   bool
		name string
	}{
		{"INVITE x SIP/2.0\r\nContent-Length: 12\r\n\r\n", 12, true, "plain"},
		{"INVITE x SIP/2.0\r\nl:3\r\n\r\n", 3, true, "compact"},
		{"INVITE x SIP/2.0\r\ncontent-length \t:  7 \r\n\r\n", 7, true, "spaces"},
		{"INVITE x SIP/2.0\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 5, true, "repeated equal"},
		{"INVITE x SIP/2.0\r\nContent-Length: 5\r\nl: 6\r\n\r\n", 0, false, "conflicting"},
		{"INVITE x SIP/2.0\r\nVia: x\r\n\r\n", 0, false, "missing"},
		{"INVITE x SIP/2.0\r\nContent-Length: -1\r\n\r\n", 0, false, "negative"},
		{"INVITE x SIP/2.0\r\nContent-Length: +1\r\n\r\n", 0, false, "plus"},
		{"INVITE x SIP/2.0\r\nContent-Length: 9999999999\r\n\r\n", 0, false, "huge"},
		{"INVITE x SIP/2.0\r\nContent-Length:\r\n\r\n", 0, false, "empty"},
		{"Content-Length: 4 SIP/2.0\r\nVia: x\r\n\r\n", 0, false, "start line is no header"},
		{"INVITE x SIP/2.0\r\nSubject: a\r\n Content-Length: 9\r\nl: 1\r\n\r\n", 1, true, "folded line"},
	} {
		n, ok := contentLength([]byte(c.hdr))
		if n != c.n || ok != c.ok {
			t.Errorf("%s: got %d %v, want %d %v", c.name, n, ok, c.n, c.ok)
		}
	}
}

// TestIdleConnectionHoldsLittle: a connection that received a large message
// drops its buffer once the message is handed on.
func TestIdleConnectionHoldsLittle(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	limits := testLimits(TCPOptions{})
	defer limits.stop()
	src := netip.MustParseAddrPort("127.0.0.1:5060")
	limits.take(src.Addr())
	c := newTCPConn(b, src, limits)
	defer c.Close()
	body := make([]byte, 40000)
	msg := fmt.Sprintf("MESSAGE sip:x SIP/2.0\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	go func() { _, _ = a.Write([]byte(msg)) }()
	got := 0
	buf := make([]byte, 32768)
	for got < len(msg) {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if cap(c.buf) <= tcpKeepBuffer {
		t.Fatalf("buffer %d; the message needed more", cap(c.buf))
	}
	go func() { _, _ = a.Write([]byte("\r\n")) }()
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if cap(c.buf) != tcpReadChunk {
		t.Fatalf("buffer %d between messages, want %d", cap(c.buf), tcpReadChunk)
	}
}

// TestPerSourceKeyIPv6Prefix: addresses of one IPv6 /64 share the per-source
// cap; IPv4 addresses and other /64s do not.
func TestPerSourceKeyIPv6Prefix(t *testing.T) {
	limits := testLimits(TCPOptions{MaxConnections: 10, MaxPerSource: 2})
	defer limits.stop()
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"2001:db8:1:2::1", true},
		{"2001:db8:1:2:ffff::9", true},
		{"2001:db8:1:2::3", false}, // third from the same /64
		{"2001:db8:1:3::1", true},
		{"192.0.2.1", true},
		{"192.0.2.2", true},
	} {
		if got := limits.take(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("take(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
	limits.give(netip.MustParseAddr("2001:db8:1:2::1"))
	if !limits.take(netip.MustParseAddr("2001:db8:1:2::7")) {
		t.Fatal("a slot given back in the /64 was not reusable")
	}
	if st := limits.stats(); st.Open != 5 || st.RefusedSource != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPlausibleStartLine(t *testing.T) {
	for line, want := range map[string]bool{
		"INVITE sip:100@pbx SIP/2.0":         true,
		"OPTIONS sip:x SIP/3.0":              true, // the stack answers 505
		"SIP/2.0 200 OK":                     true,
		"X-CUSTOM.method sip:x SIP/2.0":      true,
		"GET / HTTP/1.1":                     false,
		"INVITE sip:100@pbx":                 false,
		"\x16\x03\x01\x02\x00 sip:x SIP/2.0": false,
		" INVITE sip:x SIP/2.0":              false,
		"":                                   false,
	} {
		if got := plausibleStartLine([]byte(line + "\r\nVia: x\r\n\r\n")); got != want {
			t.Errorf("%q: %v, want %v", line, got, want)
		}
	}
}
