package b2bua_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"pbx/sipcore/siptest"
)

// send writes a request built from the format and arguments to pbx.
func (p *rawPeer) send(pbx netip.AddrPort, format string, args ...any) {
	p.t.Helper()
	if _, err := p.conn.WriteToUDPAddrPort([]byte(fmt.Sprintf(format, args...)), pbx); err != nil {
		p.t.Fatal(err)
	}
}

// until returns the first response for which match holds, reading for at
// most d.
func (p *rawPeer) until(d time.Duration, what string, match func(*sip.Response) bool) *sip.Response {
	p.t.Helper()
	deadline := time.Now().Add(d)
	buf := make([]byte, 8192)
	for {
		_ = p.conn.SetReadDeadline(deadline)
		n, _, err := p.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			p.t.Fatalf("no %s: %v", what, err)
		}
		m, err := sip.ParseMessage(append([]byte(nil), buf[:n]...))
		if err != nil {
			continue
		}
		if r, ok := m.(*sip.Response); ok && match(r) {
			return r
		}
	}
}

func toTag(r *sip.Response) string {
	tag, _ := r.To().Params.Get("tag")
	return tag
}

func cseqIs(n uint32, code int) func(*sip.Response) bool {
	return func(r *sip.Response) bool { return r.CSeq().SeqNo == n && r.StatusCode == code }
}

// TestLateChallengeKeepsTheDialogTag is the one call of 100 under load
// that the PBX kept alive for its whole media timeout after answering the
// caller's BYE 481: the caller's ACK to the 407 is lost (late under load),
// so Timer G retransmits the 407 after the 200 answering the retried
// INVITE has arrived; a caller taking the To tag of the last response it
// got (SIPp does) sends its BYE with the 407's tag. Every response to the
// initial INVITEs of one Call-ID and From tag carries the dialog's tag, so
// that BYE ends the call.
func TestLateChallengeKeepsTheDialogTag(t *testing.T) {
	e := newEnv(t, envOpts{})
	bob := e.phone("udp", "bob", "bob-pw")
	p := newRawPeer(t)
	const callID = "late407@raw"
	offer := siptest.BuildSDP(4000, []uint8{0}, "sendrecv")
	invite := func(cseq int, branch, extra string) {
		p.send(e.udp, "INVITE sip:102@%s SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP %s;branch=z9hG4bK%s;rport\r\n"+
			"From: <sip:alice@%s>;tag=rawfrom\r\nTo: <sip:102@%s>\r\n"+
			"Call-ID: %s\r\nCSeq: %d INVITE\r\nMax-Forwards: 70\r\n"+
			"Contact: <sip:alice@%s>\r\n%sContent-Type: application/sdp\r\nContent-Length: %d\r\n\r\n%s",
			domain, p.addr(), branch, domain, domain, callID, cseq, p.addr(), extra, len(offer), offer)
	}

	invite(1, "late1", "")
	challenge := p.until(wait, "407", cseqIs(1, sip.StatusProxyAuthRequired))
	chal, err := digest.ParseChallenge(challenge.GetHeader("Proxy-Authenticate").Value())
	if err != nil {
		t.Fatal(err)
	}
	cred, err := digest.Digest(chal, digest.Options{Method: "INVITE", URI: "sip:102@" + domain, Username: "alice", Password: "alice-pw", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	// No ACK for the 407: it is lost.
	invite(2, "late2", "Proxy-Authorization: "+cred.String()+"\r\n")
	ok := p.until(wait, "200", cseqIs(2, sip.StatusOK))
	dialogTag := toTag(ok)
	p.send(e.udp, "ACK sip:102@%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bKlate3;rport\r\n"+
		"From: <sip:alice@%s>;tag=rawfrom\r\nTo: <sip:102@%s>;tag=%s\r\nCall-ID: %s\r\nCSeq: 2 ACK\r\n"+
		"Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n", e.udp, p.addr(), domain, domain, dialogTag, callID)
	in := bob.WaitIncoming(wait)

	// Timer G retransmits the unacknowledged 407 (after T1, 500 ms).
	late := p.until(5*time.Second, "407 retransmission", cseqIs(1, sip.StatusProxyAuthRequired))
	if toTag(late) != dialogTag || toTag(challenge) != dialogTag {
		t.Errorf("407 To tags %q then %q, the dialog's %q", toTag(challenge), toTag(late), dialogTag)
	}
	// The BYE carries the tag of the last response received.
	p.send(e.udp, "BYE sip:102@%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bKlate4;rport\r\n"+
		"From: <sip:alice@%s>;tag=rawfrom\r\nTo: <sip:102@%s>;tag=%s\r\nCall-ID: %s\r\nCSeq: 3 BYE\r\n"+
		"Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n", e.udp, p.addr(), domain, domain, toTag(late), callID)
	if res := p.until(wait, "answer to the BYE", func(r *sip.Response) bool { return r.CSeq().MethodName == sip.BYE }); res.StatusCode != sip.StatusOK {
		t.Fatalf("BYE with the last tag received: %s, want 200", res.StartLine())
	}
	waitCh(t, in.Ended(), "bye to the callee")
	if ev := e.rec.ended(t); ev.Call.Reason != "caller hung up" {
		t.Fatalf("ended: %q", ev.Call.Reason)
	}
}
