package sipcore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/sipcore"
)

// logBuf collects text log lines from the server's goroutines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// waitLine returns the first line containing every one of subs.
func (l *logBuf) waitLine(t *testing.T, subs ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		all := l.b.String()
		l.mu.Unlock()
		for _, line := range strings.Split(all, "\n") {
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within 10s:\n%s", subs, all)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// textKeys returns the keys of a slog text line in order.
var textPair = regexp.MustCompile(`(?:^| )([^ =]+)=("(?:[^"\\]|\\.)*"|[^ ]*)`)

func textKeys(line string) []string {
	var keys []string
	for _, m := range textPair.FindAllStringSubmatch(line, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// assertUniqueKeys fails when a line repeats an attribute key.
func assertUniqueKeys(t *testing.T, line string) {
	t.Helper()
	seen := map[string]bool{}
	for _, k := range textKeys(line) {
		if seen[k] {
			t.Errorf("key %q twice in %s", k, line)
		}
		seen[k] = true
	}
}

func runLogged(t *testing.T, transport string) (*sipcore.Server, *logBuf) {
	t.Helper()
	buf := &logBuf{}
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", "sip")
	s, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "main", Transport: transport, BindHost: "127.0.0.1"}}}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready")
	}
	return s, buf
}

// TestMalformedMessageLoggedWithoutItsBytes: a message that does not parse is
// logged once as a warning of kind sip.malformed, with its source address,
// length and hash, no byte of it, and no key twice.
func TestMalformedMessageLoggedWithoutItsBytes(t *testing.T) {
	const secret = "SECRET-PAYLOAD-7f3a"
	for _, tc := range []struct {
		transport string
		msg       string
	}{
		{"udp", "GARBAGE " + secret + " \x01\x02\xff\r\n\r\n"},
		{"udp", "INVITE sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK1\r\nCSeq: " + secret + "\r\n\r\n"},
		// Over TCP the framing layer closes a stream whose first line is not
		// SIP before the parser sees it; a framed message with a broken
		// header reaches the parser.
		{"tcp", "INVITE sip:x@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1;branch=z9hG4bK1\r\nCSeq: " + secret + "\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			s, buf := runLogged(t, tc.transport)
			addr, _ := s.Addr("main")
			c, err := net.Dial(tc.transport, addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tc.msg)); err != nil {
				t.Fatal(err)
			}
			line := buf.waitLine(t, "kind=sip.malformed")
			for _, want := range []string{"level=WARN", "src=" + c.LocalAddr().String(), fmt.Sprintf("data_len=%d", len(tc.msg)), "data_hash="} {
				if !strings.Contains(line, want) {
					t.Errorf("%s lacks %s", line, want)
				}
			}
			if strings.Contains(line, secret) || strings.Contains(line, "data=") {
				t.Errorf("raw bytes logged: %s", line)
			}
			assertUniqueKeys(t, line)
		})
	}
}

// TestUnknownMethodRefused: a method nobody handles is answered 405 with
// Allow (SUBSCRIBE 489: no event package); SUBSCRIBE is logged at debug level, an unknown token at info with
// the kind the daemon rate-limits; neither at warning level.
func TestUnknownMethodRefused(t *testing.T) {
	s, buf := runLogged(t, "udp")
	addr, _ := s.Addr("main")
	c := udpClient(t)
	local := c.LocalAddr().String()
	for _, method := range []string{"SUBSCRIBE", "FOOBAR"} {
		req := fmt.Sprintf("%s sip:100@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK%s\r\n"+
			"From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:100@127.0.0.1>\r\nCall-ID: %s\r\nCSeq: 1 %s\r\n"+
			"Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n", method, local, method, method, method)
		if _, err := c.WriteToUDPAddrPort([]byte(req), addr); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 4096)
		n, _, err := c.ReadFromUDPAddrPort(b)
		if err != nil {
			t.Fatal(err)
		}
		res := string(b[:n])
		want := "SIP/2.0 405 "
		if method == "SUBSCRIBE" {
			want = "SIP/2.0 489 " // no event package (RFC 6665)
		} else if !strings.Contains(res, "\r\nAllow: OPTIONS") {
			t.Errorf("%s: %q, want Allow", method, res)
		}
		if !strings.HasPrefix(res, want) {
			t.Errorf("%s: %q, want %s", method, res, want)
		}
	}
	sub := buf.waitLine(t, "method=SUBSCRIBE", "kind=sip.unknown_method")
	foo := buf.waitLine(t, "method=FOOBAR", "kind=sip.unknown_method")
	if !strings.Contains(sub, "level=DEBUG") || !strings.Contains(sub, "src="+local) {
		t.Errorf("refused SUBSCRIBE: %s, want debug with the source", sub)
	}
	if !strings.Contains(foo, "level=INFO") || !strings.Contains(foo, "src="+local) {
		t.Errorf("unknown method: %s, want info with the source", foo)
	}
	assertUniqueKeys(t, sub)
	assertUniqueKeys(t, foo)
	buf.mu.Lock()
	all := buf.b.String()
	buf.mu.Unlock()
	if strings.Contains(all, "level=WARN") || strings.Contains(all, "level=ERROR") {
		t.Errorf("warnings for refused methods:\n%s", all)
	}
	// sipgo's own records carry one component and one caller.
	for _, line := range strings.Split(all, "\n") {
		if strings.Contains(line, "caller=") {
			assertUniqueKeys(t, line)
		}
	}
}
