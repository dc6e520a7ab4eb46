package b2bua

import (
	"errors"
	"strings"
	"time"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
)

// ackKey names the ACK a 2xx the PBX sent waits for: the side of the call
// (nil leg: the caller) and the CSeq number of the INVITE it answers.
type ackKey struct {
	leg  *outLeg
	cseq uint32
}

// expectAck registers interest in the ACK for the 2xx answering the
// INVITE with cseq on side leg. The channel receives it once.
func (c *Call) expectAck(leg *outLeg, cseq uint32) chan *sip.Request {
	ch := make(chan *sip.Request, 1)
	c.ackMu.Lock()
	if c.acks == nil {
		c.acks = map[ackKey]chan *sip.Request{}
	}
	c.acks[ackKey{leg, cseq}] = ch
	c.ackMu.Unlock()
	return ch
}

func (c *Call) dropAckWait(leg *outLeg, cseq uint32) {
	c.ackMu.Lock()
	delete(c.acks, ackKey{leg, cseq})
	c.ackMu.Unlock()
}

// deliverAck hands an ACK to the retransmission loop waiting for it; it
// reports whether one was.
func (c *Call) deliverAck(leg *outLeg, ack *sip.Request) bool {
	cs := ack.CSeq()
	if cs == nil {
		return false
	}
	k := ackKey{leg, cs.SeqNo}
	c.ackMu.Lock()
	ch, ok := c.acks[k]
	delete(c.acks, k)
	c.ackMu.Unlock()
	if ok {
		ch <- ack
	}
	return ok
}

// errNoAck: the caller did not ACK the 2xx answering its INVITE within
// 64*T1.
var errNoAck = errors.New("no ack within 64*T1")

// confirmAnswer sends the caller the 2xx answering its INVITE and waits
// for the ACK. sipgo's dialog retransmits that 2xx, but gives up only when
// a retransmission fails, which sipcore makes the first one past 64*T1
// after the 2xx (the INVITE's transaction ends sooner, and the transport
// takes the retransmissions then: sipcore.CompletedLinger), up to T2 past
// it; the wait here stops at the RFC 3261 section 13.3.1.4 timer itself,
// 64*T1 of the Manager's timers, so a caller that never ACKs (one
// overloaded) has its call, media ports included, released then. sipgo's
// goroutine may retransmit until then; it holds no media and not the call.
func (c *Call) confirmAnswer(body []byte, hdrs []sip.Header) error {
	ds := c.caller
	errc := make(chan error, 1)
	go func() { errc <- ds.Respond(sip.StatusOK, "OK", body, hdrs...) }()
	giveUp := time.NewTimer(64 * c.m.t1)
	defer giveUp.Stop()
	select {
	case err := <-errc:
		return err
	case <-giveUp.C:
		return errNoAck
	}
}

// respond2xx sends the 2xx res for an INVITE the PBX answers inside the
// dialog (a re-INVITE) and retransmits it until the ACK arrives, as
// RFC 3261 section 13.3.1.4 has the UAS core do, whatever the transport
// (the ACK is end to end, TCP to the PBX says nothing of later hops): first
// after T1, the interval doubling up to T2. It returns the ACK, or nil when
// none came within 64*T1 or the call ended; the caller then ends the
// session with BYE, as the same section says.
func (c *Call) respond2xx(tx sip.ServerTransaction, leg *outLeg, res *sip.Response) *sip.Request {
	cseq := res.CSeq().SeqNo
	ch := c.expectAck(leg, cseq)
	defer c.dropAckWait(leg, cseq)
	if err := tx.Respond(res); err != nil {
		c.log.Debug("answer re-invite", "err", err)
	}
	t1, t2 := c.m.t1, c.m.t2
	interval := t1
	retransmit := time.NewTimer(interval)
	defer retransmit.Stop()
	giveUp := time.NewTimer(64 * t1)
	defer giveUp.Stop()
	for {
		select {
		case ack := <-ch:
			return ack
		case ack := <-tx.Acks():
			// A peer reusing the INVITE's branch for the ACK: the
			// transaction matched it.
			return ack
		case <-retransmit.C:
			if err := tx.Respond(res); err != nil {
				// The transaction is gone (a reliable transport ends it
				// early): write the retransmission to the transport.
				_ = c.m.sip.SIP().WriteResponse(res)
			}
			interval = min(2*interval, t2)
			retransmit.Reset(interval)
		case <-giveUp.C:
			return nil
		case <-c.done:
			return nil
		}
	}
}

// reack answers a retransmitted 2xx to an INVITE the PBX sent on side leg
// (nil: the caller), once its client transaction has ended: RFC 3261
// section 13.2.2.4 has the UAC core ACK every 2xx retransmission. The ACK
// is built from the response, so it carries the CSeq of the INVITE that
// 2xx answers: a re-INVITE's, not the initial INVITE's.
func (c *Call) reack(leg *outLeg, res *sip.Response) {
	var (
		uri       sip.Uri
		client    *sipgo.Client
		dest      string
		transport string
	)
	if leg == nil {
		ct := c.caller.InviteRequest.Contact()
		if ct == nil {
			return
		}
		uri, client, transport = ct.Address, c.callerEP.Client, c.invite.Transport()
		if rewriteContact(c.invite, strings.ToLower(transport)) {
			dest = c.invite.Source()
		}
	} else {
		d := leg.dialog
		if d == nil || d.InviteResponse == nil {
			return
		}
		uri = d.InviteRequest.Recipient
		if ct := d.InviteResponse.Contact(); ct != nil {
			uri = ct.Address
		}
		client, transport = leg.ep.Client, d.InviteRequest.Transport()
		if leg.target.Destination.IsValid() {
			dest = leg.target.Destination.String()
		}
	}
	from, to, callID, cseq := res.From(), res.To(), res.CallID(), res.CSeq()
	if from == nil || to == nil || callID == nil || cseq == nil {
		return
	}
	ack := sip.NewRequest(sip.ACK, *uri.Clone())
	ack.AppendHeader(sip.HeaderClone(from))
	ack.AppendHeader(sip.HeaderClone(to))
	ack.AppendHeader(sip.HeaderClone(callID))
	ack.AppendHeader(&sip.CSeqHeader{SeqNo: cseq.SeqNo, MethodName: sip.ACK})
	mf := sip.MaxForwardsHeader(70)
	ack.AppendHeader(&mf)
	c.m.sip.DecorateRequest(ack)
	ack.SetTransport(transport)
	if dest != "" {
		ack.SetDestination(dest)
	}
	if err := client.WriteRequest(ack); err != nil {
		c.log.Debug("re-ack 2xx", "cseq", cseq.SeqNo, "err", err)
	}
}
