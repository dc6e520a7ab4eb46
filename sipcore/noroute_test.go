package sipcore_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
)

// request sends a bare request of method over c and returns the response.
func request(t *testing.T, s *sipcore.Server, method, extra string) string {
	t.Helper()
	c := udpClient(t)
	to, _ := s.Addr("main")
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	branch := "nr" + strings.ToLower(method) + sip.GenerateTagN(8)
	msg := fmt.Sprintf("%s sip:pbx@127.0.0.1 SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK%s\r\n"+
		"From: <sip:probe@127.0.0.1>;tag=1\r\nTo: <sip:pbx@127.0.0.1>\r\n"+
		"Call-ID: %s\r\nCSeq: 1 %s\r\nMax-Forwards: 70\r\n%sContent-Length: 0\r\n\r\n", method, local, branch, branch, method, extra)
	if _, err := c.WriteToUDPAddrPort([]byte(msg), to); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return string(buf[:n])
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestUnhandledMethodsAnsweredPerRFC(t *testing.T) {
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := runWithLog(t, sipcore.Options{Listeners: []sipcore.Listener{{ID: "main", Transport: "udp", BindHost: "127.0.0.1"}}}, log)
	for _, tc := range []struct {
		method, extra string
		want          []string
		not           []string
	}{
		{"REFER", "Refer-To: <sip:103@127.0.0.1>\r\n", []string{"SIP/2.0 405 Method Not Allowed", "Allow: OPTIONS"}, nil},
		{"MESSAGE", "", []string{"SIP/2.0 405 Method Not Allowed", "Allow: OPTIONS"}, nil},
		{"SUBSCRIBE", "Event: message-summary\r\nExpires: 600\r\n", []string{"SIP/2.0 489 Bad Event", "Allow: OPTIONS"}, []string{"Allow-Events:"}},
		{"SUBSCRIBE", "Event: presence\r\n", []string{"SIP/2.0 489 Bad Event", "Allow: OPTIONS"}, []string{"Allow-Events:"}},
		{"PRACK", "RAck: 1 1 INVITE\r\n", []string{"SIP/2.0 420 Bad Extension", "Unsupported: 100rel", "Allow: OPTIONS"}, nil},
	} {
		res := request(t, s, tc.method, tc.extra)
		for _, w := range tc.want {
			if !strings.Contains(res, w) {
				t.Errorf("%s: response lacks %q:\n%s", tc.method, w, res)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(res, w) {
				t.Errorf("%s: response has %q:\n%s", tc.method, w, res)
			}
		}
	}
	out := logs.String()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("refusal logged above debug: %s", l)
		}
	}
	for _, m := range []string{"REFER", "SUBSCRIBE"} {
		if !strings.Contains(out, `msg="sip request refused" method=`+m) {
			t.Errorf("no debug line for the refused %s:\n%s", m, out)
		}
	}
}

func TestPhraseIsStandardForEveryStatus(t *testing.T) {
	for code, want := range map[int]string{
		100: "Trying", 180: "Ringing", 183: "Session Progress", 200: "OK", 202: "Accepted",
		405: "Method Not Allowed", 420: "Bad Extension", 481: "Call/Transaction Does Not Exist",
		488: "Not Acceptable Here", 489: "Bad Event", 491: "Request Pending", 503: "Service Unavailable",
		603: "Decline", 299: "OK", 499: "Bad Request", 699: "Global Failure",
	} {
		if got := sipcore.Phrase(code); got != want {
			t.Errorf("Phrase(%d) = %q, want %q", code, got, want)
		}
	}
	for code := 100; code < 700; code++ {
		if p := sipcore.Phrase(code); p == "" || p == "Error" {
			t.Fatalf("Phrase(%d) = %q", code, p)
		}
	}
}

func TestUnsupportedRequireListsEveryUnknownTag(t *testing.T) {
	req := sip.NewRequest(sip.INVITE, sip.Uri{Scheme: "sip", Host: "127.0.0.1"})
	req.AppendHeader(sip.NewHeader("Require", "100rel, foo"))
	req.AppendHeader(sip.NewHeader("Require", "100rel"))
	got := sipcore.UnsupportedRequire(req)
	if strings.Join(got, ",") != "100rel,foo" {
		t.Fatalf("unsupported %v", got)
	}
	res := sipcore.BadExtension(req, got)
	if res.StatusCode != 420 || res.Reason != "Bad Extension" || res.GetHeader("Unsupported").Value() != "100rel, foo" {
		t.Fatalf("420: %s", res.String())
	}
	ack := sip.NewRequest(sip.ACK, sip.Uri{Scheme: "sip", Host: "127.0.0.1"})
	ack.AppendHeader(sip.NewHeader("Require", "100rel"))
	if u := sipcore.UnsupportedRequire(ack); len(u) != 0 {
		t.Fatalf("ACK refused for %v", u)
	}
}
