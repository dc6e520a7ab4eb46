package sipcore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/sipcore"
)

// run builds a server, lets setup register handlers, and serves it until
// the test ends.
func run(t testing.TB, opts sipcore.Options, setup ...func(*sipcore.Server)) *sipcore.Server {
	t.Helper()
	return runWithLog(t, opts, nil, setup...)
}

// runWithLog is run with a logger.
func runWithLog(t testing.TB, opts sipcore.Options, log *slog.Logger, setup ...func(*sipcore.Server)) *sipcore.Server {
	t.Helper()
	s, err := sipcore.New(opts, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		s.Close()
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready")
	}
	return s
}

func options(branch string, local netip.AddrPort) []byte {
	return []byte(fmt.Sprintf("OPTIONS sip:pbx@127.0.0.1 SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK%s\r\n"+
		"From: <sip:probe@127.0.0.1>;tag=1\r\nTo: <sip:pbx@127.0.0.1>\r\n"+
		"Call-ID: %s\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n", local, branch, branch))
}

func udpClient(t *testing.T) *net.UDPConn {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func exchange(t *testing.T, c *net.UDPConn, to netip.AddrPort, branch string, wait time.Duration) (string, error) {
	t.Helper()
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	if _, err := c.WriteToUDPAddrPort(options(branch, local), to); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 4096)
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func TestOptionsAnsweredWithAllowAcceptServer(t *testing.T) {
	s := run(t, sipcore.Options{Listeners: []sipcore.Listener{{ID: "main", Transport: "udp", BindHost: "127.0.0.1"}}})
	addr, ok := s.Addr("main")
	if !ok || addr.Port() == 0 {
		t.Fatalf("bound address %v %v", addr, ok)
	}
	res, err := exchange(t, udpClient(t), addr, "opt1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIP/2.0 200 OK", "Allow: ", "Accept: application/sdp", "Server: pbx"} {
		if !strings.Contains(res, want) {
			t.Fatalf("response lacks %q:\n%s", want, res)
		}
	}
}

func TestEmptyUserAgentRemovesServerHeader(t *testing.T) {
	s := run(t, sipcore.Options{UserAgent: sipcore.StringPtr(""), Listeners: []sipcore.Listener{{ID: "main", Transport: "udp", BindHost: "127.0.0.1"}}})
	addr, _ := s.Addr("main")
	res, err := exchange(t, udpClient(t), addr, "opt2", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res, "Server:") || s.UserAgentHeader() != nil {
		t.Fatalf("Server header present with empty user agent:\n%s", res)
	}
}

func TestBindErrorsNameTheListener(t *testing.T) {
	taken := udpClient(t)
	port := taken.LocalAddr().(*net.UDPAddr).Port
	_, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{
		{ID: "ok", Transport: "tcp", BindHost: "127.0.0.1"},
		{ID: "busy-udp", Transport: "udp", BindHost: "127.0.0.1", BindPort: port},
	}}, nil)
	if !errors.Is(err, sipcore.ErrBind) || !strings.Contains(err.Error(), `"busy-udp"`) {
		t.Fatalf("err = %v", err)
	}
	for _, tr := range []string{"tls", "wss"} {
		_, err = sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "secure", Transport: tr}}}, nil)
		if !errors.Is(err, sipcore.ErrTransportUnsupported) || !strings.Contains(err.Error(), `"secure"`) {
			t.Fatalf("%s: err = %v", tr, err)
		}
	}
	_, err = sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "a", Transport: "udp", BindHost: "127.0.0.1"}, {ID: "a", Transport: "tcp", BindHost: "127.0.0.1"}}}, nil)
	if !errors.Is(err, sipcore.ErrInvalidOptions) {
		t.Fatalf("duplicate id: %v", err)
	}
}

func TestAdmissionHookDropsBeforeParsing(t *testing.T) {
	blocked, allowed := udpClient(t), udpClient(t)
	blockedAddr := blocked.LocalAddr().(*net.UDPAddr).AddrPort()
	var mu sync.Mutex
	seen := map[netip.AddrPort]bool{}
	s := run(t, sipcore.Options{
		Listeners: []sipcore.Listener{{ID: "main", Transport: "udp", BindHost: "127.0.0.1"}},
		Admit: func(src netip.AddrPort, transport string, packet []byte) bool {
			mu.Lock()
			seen[src] = transport == "udp" && len(packet) > 0
			mu.Unlock()
			return src != blockedAddr
		},
	})
	addr, _ := s.Addr("main")
	local := blockedAddr
	if _, err := blocked.WriteToUDPAddrPort(options("blk", local), addr); err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(t, allowed, addr, "alw", 10*time.Second); err != nil {
		t.Fatalf("allowed source got no answer: %v", err)
	}
	mu.Lock()
	sawBlocked := seen[blockedAddr]
	mu.Unlock()
	if !sawBlocked {
		t.Fatalf("admission hook never saw the blocked source")
	}
	// The read loop handles datagrams in order, so the blocked one was
	// already dropped; nothing may arrive.
	_ = blocked.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 2048)
	if n, _, err := blocked.ReadFromUDPAddrPort(buf); err == nil {
		t.Fatalf("blocked source got an answer:\n%s", buf[:n])
	}
}

func TestEndpointsAdvertiseExternalHost(t *testing.T) {
	s := run(t, sipcore.Options{ExternalHost: "pbx.example.net", ContactUser: "switch", Listeners: []sipcore.Listener{
		{ID: "u", Transport: "udp", BindHost: "127.0.0.1"},
		{ID: "t", Transport: "tcp", BindHost: "127.0.0.1"},
	}})
	ep, err := s.Endpoint("tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	c := ep.Contact.Address.String()
	if !strings.HasPrefix(c, "sip:switch@pbx.example.net:") || !strings.Contains(c, "transport=tcp") || ep.ListenerID != "t" {
		t.Fatalf("tcp contact %q (%s)", c, ep.ListenerID)
	}
	if _, err := s.Endpoint("", "nope"); !errors.Is(err, sipcore.ErrNoListener) {
		t.Fatalf("unknown listener: %v", err)
	}
	if !strings.Contains(s.Allow(), "OPTIONS") {
		t.Fatalf("Allow %q", s.Allow())
	}
}

func TestIPv6ListenerAdvertisesBracketedHost(t *testing.T) {
	s, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "v6", Transport: "udp", BindHost: "::1"}}}, nil)
	if err != nil {
		// Without IPv6 loopback the failure must still name the listener.
		if !errors.Is(err, sipcore.ErrBind) || !strings.Contains(err.Error(), `"v6"`) {
			t.Fatalf("err = %v", err)
		}
		return
	}
	defer s.Close()
	ep, err := s.Endpoint("udp", "")
	if err != nil {
		t.Fatal(err)
	}
	if ep.Host != "[::1]" || !strings.Contains(ep.Contact.Address.String(), "@[::1]:") {
		t.Fatalf("host %q contact %q", ep.Host, ep.Contact.Address.String())
	}
}
