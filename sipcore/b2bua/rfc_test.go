package b2bua_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/siptest"
)

// rawPeer is a UDP socket speaking SIP by hand, for what a well-behaved
// sipgo phone never does (skip an ACK, require an extension).
type rawPeer struct {
	t    *testing.T
	conn *net.UDPConn
}

func newRawPeer(t *testing.T) *rawPeer {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawPeer{t: t, conn: c}
}

func (p *rawPeer) addr() netip.AddrPort { return p.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// invite sends an INVITE for user at the PBX with extra header lines and
// an SDP offer (none when sdp is nil).
func (p *rawPeer) invite(pbx netip.AddrPort, user, branch, extra string, sdp []byte) {
	p.t.Helper()
	ct := ""
	if sdp != nil {
		ct = "Content-Type: application/sdp\r\n"
	}
	msg := fmt.Sprintf("INVITE sip:%s@%s SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK%s;rport\r\n"+
		"From: <sip:raw@%s>;tag=raw%s\r\nTo: <sip:%s@%s>\r\n"+
		"Call-ID: %s@raw\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n"+
		"Contact: <sip:raw@%s>\r\n%s%sContent-Length: %d\r\n\r\n%s",
		user, domain, p.addr(), branch, domain, branch, user, domain, branch, p.addr(), extra, ct, len(sdp), sdp)
	if _, err := p.conn.WriteToUDPAddrPort([]byte(msg), pbx); err != nil {
		p.t.Fatal(err)
	}
}

// response returns the next response with a status of at least min.
func (p *rawPeer) response(min int) *sip.Response {
	p.t.Helper()
	deadline := time.Now().Add(wait)
	buf := make([]byte, 8192)
	for {
		_ = p.conn.SetReadDeadline(deadline)
		n, _, err := p.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			p.t.Fatalf("no response >= %d: %v", min, err)
		}
		m, err := sip.ParseMessage(append([]byte(nil), buf[:n]...))
		if err != nil {
			continue
		}
		if r, ok := m.(*sip.Response); ok && r.StatusCode >= min {
			return r
		}
	}
}

func TestInviteRequiring100relGets420(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := newRawPeer(t)
	p.invite(e.udp, "102", "rel1", "Require: 100rel\r\nSupported: 100rel\r\n", siptest.BuildSDP(4000, []uint8{0}, "sendrecv"))
	res := p.response(200)
	if res.StatusCode != 420 || res.Reason != "Bad Extension" {
		t.Fatalf("got %s, want 420 Bad Extension", res.StartLine())
	}
	if h := res.GetHeader("Unsupported"); h == nil || h.Value() != "100rel" {
		t.Fatalf("Unsupported header %v", h)
	}
	if n := e.calls.Active(); n != 0 {
		t.Fatalf("%d calls live after 420", n)
	}
}

// A rejected call's record ends when the final response leaves, not when
// the caller's ACK arrives or Timer H (64*T1 = 32 s) gives up waiting.
func TestRejectedCallEndsAtFinalResponseWithoutAck(t *testing.T) {
	e := newEnv(t, envOpts{identify: func(req *sip.Request, src netip.AddrPort) (b2bua.Caller, bool, *b2bua.Rejection) {
		return b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: tenant, Username: "alice", Extension: "101"}, true, nil
	}})
	p := newRawPeer(t)
	sent := time.Now()
	p.invite(e.udp, "999", "rej1", "", siptest.BuildSDP(4000, []uint8{0}, "sendrecv"))
	res := p.response(200)
	if res.StatusCode != 404 || res.Reason != "Not Found" {
		t.Fatalf("got %s, want 404 Not Found", res.StartLine())
	}
	got := time.Now()
	// No ACK is ever sent.
	ev := e.rec.ended(t)
	if ev.Call.SIPStatus != 404 || ev.Call.Cause != calls.CauseNoRoute {
		t.Fatalf("ended %d %s", ev.Call.SIPStatus, ev.Call.Cause)
	}
	if ev.Call.End.Before(sent) || ev.Call.End.After(got) {
		t.Fatalf("end %v not between the INVITE (%v) and the 404's arrival (%v)", ev.Call.End, sent, got)
	}
	if d := time.Since(got); d > 5*time.Second {
		t.Fatalf("ended event %v after the final response", d)
	}
	if !strings.HasPrefix(string(ev.Call.ID), ev.Call.Start.UTC().Format("20060102T")) {
		t.Fatalf("call id %s", ev.Call.ID)
	}
}
