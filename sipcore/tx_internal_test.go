package sipcore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
)

// TestReleaseRequestDropsHeaders: a released REGISTER keeps its request
// line and routing fields, and of its eleven headers only an empty
// Content-Length, so the transaction lingering in Completed holds no more
// of it.
func TestReleaseRequestDropsHeaders(t *testing.T) {
	raw := "REGISTER sip:acme.example SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;rport;branch=z9hG4bK-rel\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@acme.example>;tag=a\r\n" +
		"To: <sip:alice@acme.example>\r\n" +
		"Call-ID: rel@test\r\n" +
		"CSeq: 1 REGISTER\r\n" +
		"Contact: <sip:alice@127.0.0.1:5070>\r\n" +
		"Expires: 600\r\n" +
		"User-Agent: test\r\n" +
		"Authorization: Digest username=\"alice\", realm=\"acme.example\", nonce=\"n\", uri=\"sip:acme.example\", response=\"r\"\r\n" +
		"Content-Length: 4\r\n\r\nbody"
	msg, err := sip.NewParser().ParseSIP([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	req := msg.(*sip.Request)
	req.SetSource("127.0.0.1:5070")
	if n := len(req.Headers()); n != 11 {
		t.Fatalf("parsed %d headers, want 11", n)
	}
	releaseRequest(req)
	hs := req.Headers()
	if len(hs) != 1 || hs[0].Name() != "Content-Length" || hs[0].Value() != "0" {
		t.Fatalf("headers after release: %v", hs)
	}
	if req.Via() != nil || req.From() != nil || req.CallID() != nil || req.GetHeader("Authorization") != nil {
		t.Fatal("a released header is still reachable")
	}
	if len(req.Body()) != 0 {
		t.Fatalf("body %q kept", req.Body())
	}
	if req.Method != sip.REGISTER || req.Recipient.Host != "acme.example" || req.Source() != "127.0.0.1:5070" {
		t.Fatalf("request line or source lost: %s %s from %s", req.Method, req.Recipient.String(), req.Source())
	}
	if !releasesRequest(sip.REGISTER) || releasesRequest(sip.INVITE) || releasesRequest(sip.SUBSCRIBE) {
		t.Fatal("only REGISTER requests are released")
	}
}

// TestHeaderLookupMatchesSipgo: Header and Headers find what sipgo's
// GetHeader and GetHeaders find, whatever the case of the name, without
// allocating for a lookup by header name.
func TestHeaderLookupMatchesSipgo(t *testing.T) {
	res := sip.NewResponse(sip.StatusOK, "OK")
	res.AppendHeader(sip.NewHeader("Expires", "60"))
	res.AppendHeader(sip.NewHeader("Require", "a"))
	res.AppendHeader(sip.NewHeader("require", "b"))
	for _, name := range []string{"Require", "REQUIRE", "Expires", "Server"} {
		if got, want := Header(res, name), res.GetHeader(name); got != want {
			t.Fatalf("Header(%q) = %v, sipgo %v", name, got, want)
		}
		if got, want := Headers(res, name), res.GetHeaders(name); len(got) != len(want) {
			t.Fatalf("Headers(%q) = %v, sipgo %v", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Header(res, "Server") }); n != 0 {
		t.Fatalf("Header allocates %.0f times", n)
	}
}

// terminatedTx stands for an INVITE's transaction: Respond returns err.
type terminatedTx struct {
	sip.ServerTransaction
	err error
}

func (f *terminatedTx) Respond(*sip.Response) error { return f.err }

// TestAnswerRetransmittedPastItsTransaction: once the INVITE's
// transaction has ended (Timer L, CompletedLinger after the first 2xx),
// a 2xx retransmission goes to the transport until 64*T1 after the
// first, and fails after, which ends sipgo's retransmission loop; other
// responses and other methods' transactions never fall back.
func TestAnswerRetransmittedPastItsTransaction(t *testing.T) {
	s, err := New(Options{Listeners: []Listener{{ID: "main", Transport: "udp", BindHost: "127.0.0.1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	<-s.Ready()
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	received := func() bool {
		_ = peer.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 4096)
		n, _, err := peer.ReadFromUDP(buf)
		return err == nil && strings.HasPrefix(string(buf[:n]), "SIP/2.0 200 OK")
	}
	// The caller has spoken to the PBX through the transaction layer (its
	// INVITE did), so the transport has a connection to answer it on.
	addr, _ := s.Addr("main")
	message := fmt.Sprintf("MESSAGE sip:pbx@127.0.0.1 SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK-opt\r\n"+
		"From: <sip:alice@127.0.0.1>;tag=a\r\nTo: <sip:pbx@127.0.0.1>\r\n"+
		"Call-ID: opt@test\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n", peer.LocalAddr())
	if _, err := peer.WriteToUDPAddrPort([]byte(message), addr); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := peer.ReadFromUDP(make([]byte, 4096)); err != nil {
		t.Fatalf("no answer to MESSAGE: %v", err)
	}
	raw := fmt.Sprintf("INVITE sip:bob@127.0.0.1 SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK-late\r\n"+
		"From: <sip:alice@127.0.0.1>;tag=a\r\nTo: <sip:bob@127.0.0.1>\r\n"+
		"Call-ID: late@test\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n", peer.LocalAddr())
	msg, err := sip.NewParser().ParseSIP([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	req := msg.(*sip.Request)
	req.SetTransport("UDP")
	req.SetSource(peer.LocalAddr().String())
	ok := sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil)

	inner := &terminatedTx{}
	tx := s.wrapTx(inner, sip.INVITE)
	if err := tx.Respond(ok); err != nil || tx.answered.Load() == 0 {
		t.Fatalf("first 200: %v, answered at %d", err, tx.answered.Load())
	}
	inner.err = sip.ErrTransactionTerminated
	if err := tx.Respond(ok); err != nil {
		t.Fatalf("200 after the transaction's end: %v", err)
	}
	if !received() {
		t.Fatal("the retransmitted 200 did not reach the caller")
	}
	if err := tx.Respond(sip.NewResponseFromRequest(req, sip.StatusBusyHere, "Busy Here", nil)); !errors.Is(err, sip.ErrTransactionTerminated) || received() {
		t.Fatalf("a 486 after the transaction's end: %v, and sent", err)
	}
	tx.answered.Store(time.Now().Add(-answerWindow() - time.Second).UnixNano())
	if err := tx.Respond(ok); !errors.Is(err, sip.ErrTransactionTerminated) || received() {
		t.Fatalf("200 past 64*T1: %v, and sent", err)
	}
	bye := s.wrapTx(inner, sip.BYE)
	if err := bye.Respond(ok); !errors.Is(err, sip.ErrTransactionTerminated) || received() {
		t.Fatalf("a BYE's 200 after its transaction's end: %v, and sent", err)
	}
}
