package b2bua

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
	"pbx/sipcore/calls"
)

// Kinds of transfer.
const (
	TransferBlind    = "blind"
	TransferAttended = "attended"
)

// EventTransfer is delivered when a transfer ended (answered or failed);
// Event.Transfer says which.
const EventTransfer EventKind = "transfer"

// Transfer describes a call transfer: to the Router (Inbound.Transfer) and
// in EventTransfer.
type Transfer struct {
	Kind string // TransferBlind, TransferAttended
	By   string // the transferring party: extension, number or user
	To   string // the target: the Refer-To user, or the party joined
	// Result and SIPStatus are the outcome (EventTransfer only): answered,
	// or the new leg's failure.
	Result    calls.Cause
	SIPStatus int
}

// transferorGrace is how long the transferor may take to hang up by itself
// after the final NOTIFY before the PBX sends BYE.
const transferorGrace = 2 * time.Second

// transferJob is handed to a call's goroutine: run a transfer (refer), or
// hand a party over to another call's transfer (handoff, attended).
type transferJob struct {
	x       *transfer
	refer   *sip.Request
	target  sip.Uri // blind: the Refer-To URI
	handoff party   // attended, to the other call: its transferor side
	// accepted is closed once the REFER's 202 is sent: the first NOTIFY
	// follows it (RFC 3515 section 2.4.4).
	accepted chan struct{}
}

// notify sends the transferor a NOTIFY of the REFER's progress, unless it
// asked for none (Refer-Sub: false, RFC 4488 section 4).
func (job transferJob) notify(status int, final bool) {
	if job.refer != nil && strings.EqualFold(headerValue(job.refer, "Refer-Sub"), "false") {
		return
	}
	job.x.transferor.notifyRefer(status, final)
}

func headerValue(req *sip.Request, name string) string {
	if h := req.GetHeader(name); h != nil {
		return strings.TrimSpace(h.Value())
	}
	return ""
}

// transfer is one transfer in progress or done: the transferee a (the
// party the transferor was talking to) and the new party b.
type transfer struct {
	owner      *Call
	kind       string
	transferor party
	a, b       party
	other      *Call // attended: the call whose party b is
	held       party // a party to take off hold once joined
	codecs     []sdp.Codec
	reinvite   sync.Mutex
	hold       holdState     // music on hold between the joined parties (moh.go)
	done       chan struct{} // closed when the joined call ended
}

// side returns party 0 (a) or 1 (b).
func (x *transfer) side(i int) party {
	if i == 0 {
		return x.a
	}
	return x.b
}

// handleRefer accepts a REFER (RFC 3515) inside an answered call's dialog
// from either party: 202, then the transfer runs on the call's goroutine
// with NOTIFY progress. A REFER outside a dialog gets 405 (the PBX accepts
// REFER only in a call), one for an unknown dialog 481, one whose Refer-To
// is missing or unusable 400 (section 2.4.1), one while the call is not
// answered or already transferring 491.
func (m *Manager) handleRefer(req *sip.Request, tx sip.ServerTransaction) {
	if !hasToTag(req) {
		res := sipcore.Response(req, sip.StatusMethodNotAllowed)
		res.AppendHeader(sip.NewHeader("Allow", m.sip.Allow()))
		_ = tx.Respond(res)
		return
	}
	ref, ok := m.lookupDialog(req)
	if !ok || ref.xfer != nil {
		// A transferred call is not transferred again (nor by its
		// detached transferor).
		respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
		return
	}
	c := ref.call
	hs := req.GetHeaders("Refer-To")
	if len(hs) != 1 {
		respond(tx, req, sip.StatusBadRequest, "Bad Request")
		return
	}
	var target sip.Uri
	if err := sip.ParseUri(referURI(hs[0].Value()), &target); err != nil || target.User == "" {
		respond(tx, req, sip.StatusBadRequest, "Bad Request")
		return
	}
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	if w == nil || (ref.leg != nil && ref.leg != w) || m.transferring(c, nil) {
		respond(tx, req, sip.StatusRequestPending, sipcore.Phrase(sip.StatusRequestPending))
		return
	}
	x := &transfer{owner: c, kind: TransferBlind, transferor: party{c: c, leg: ref.leg}, done: make(chan struct{})}
	x.a = party{c: c, leg: w}
	if ref.leg != nil {
		x.a = party{c: c}
	}
	job := transferJob{x: x, refer: req, target: target, accepted: make(chan struct{})}
	if rep := replacesOf(target); rep != "" {
		// Attended transfer (RFC 5589 section 7): the Refer-To names the
		// transferor's other dialog, through this PBX, in Replaces (RFC
		// 3891).
		other, ok := m.replaced(rep, c)
		if !ok {
			respond(tx, req, sip.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
			return
		}
		x.kind, x.other = TransferAttended, other.c
		job.handoff = other
	}
	if ref.leg == nil && !c.awaitCallerAck() {
		// The caller's ACK of the 2xx is still on its way: taking the
		// REFER's CSeq first would make that ACK look stale.
		respond(tx, req, sip.StatusRequestPending, sipcore.Phrase(sip.StatusRequestPending))
		return
	}
	if err := x.transferor.readRequest(req, tx); err != nil {
		respond(tx, req, sip.StatusInternalServerError, "Server Internal Error")
		return
	}
	select {
	case c.transferJobs <- job:
		c.wake()
	default:
		respond(tx, req, sip.StatusRequestPending, sipcore.Phrase(sip.StatusRequestPending))
		return
	}
	res := sipcore.Response(req, sip.StatusAccepted)
	if strings.EqualFold(headerValue(req, "Refer-Sub"), "false") {
		// RFC 4488 section 4: the 202 confirms no subscription was made.
		res.AppendHeader(sip.NewHeader("Refer-Sub", "false"))
	}
	_ = tx.Respond(res)
	close(job.accepted)
}

// transferring reports whether a transfer other than except took over a
// dialog of c (one runs, or c was joined): c takes no other.
func (m *Manager) transferring(c *Call, except *transfer) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.dialogs {
		if r.xfer != nil && r.xfer != except && (r.call == c || r.xfer.other == c) {
			return true
		}
	}
	return false
}

// referURI is the URI of a Refer-To value: inside its angle brackets (a
// name-addr, with a display name and header parameters around it), else
// the value up to its first parameter.
func referURI(v string) string {
	if i := strings.IndexByte(v, '<'); i >= 0 {
		if j := strings.IndexByte(v[i:], '>'); j > 0 {
			return v[i+1 : i+j]
		}
	}
	v = strings.TrimSpace(v)
	if i := strings.IndexByte(v, ';'); i >= 0 {
		return v[:i]
	}
	return v
}

// replacesOf returns the unescaped Replaces header embedded in a Refer-To
// URI (sip:c@host?Replaces=callid%3Bto-tag%3D..%3Bfrom-tag%3D..), or "".
func replacesOf(u sip.Uri) string {
	if u.Headers == nil {
		return ""
	}
	for _, kv := range u.Headers {
		if strings.EqualFold(kv.K, "Replaces") {
			v, err := url.QueryUnescape(kv.V)
			if err != nil {
				return ""
			}
			return v
		}
	}
	return ""
}

// replaced finds the party a Replaces value (callid;to-tag=..;from-tag=..,
// RFC 3891 section 6.1, as the transferor sees its dialog) names: it must
// be an answered party of another call of the same tenant than c.
func (m *Manager) replaced(v string, c *Call) (party, bool) {
	parts := strings.Split(v, ";")
	callID := strings.TrimSpace(parts[0])
	var toTag, fromTag string
	for _, p := range parts[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch strings.ToLower(k) {
		case "to-tag":
			toTag = val
		case "from-tag":
			fromTag = val
		}
	}
	if callID == "" || toTag == "" || fromTag == "" {
		return party{}, false
	}
	// The transferor's own tag is the from-tag; the PBX's the to-tag. A
	// dialog where the PBX is the UAS is keyed with the PBX's tag first
	// (sipgo's UAS id), one where it is the UAC the same way round.
	var found *dialogRef
	m.mu.Lock()
	for _, id := range []string{sip.DialogIDMake(callID, toTag, fromTag), sip.DialogIDMake(callID, fromTag, toTag)} {
		if r, ok := m.dialogs[id]; ok && r.call != c && r.xfer == nil {
			found = &r
			break
		}
	}
	m.mu.Unlock()
	if found == nil || found.call.Info().Tenant != c.Info().Tenant {
		return party{}, false
	}
	return party{c: found.call, leg: found.leg}, true
}

// runTransfer runs a transfer on the call's goroutine. It returns true when
// the call ended (joined and hung up, or the transferee gone), false when
// the transfer failed and the original call goes on.
func (c *Call) runTransfer(job transferJob) bool {
	x := job.x
	if x.owner != c {
		return c.handOff(job)
	}
	<-job.accepted
	job.notify(sip.StatusTrying, false)
	c.m.addDialog(x.transferor.dialogID(), dialogRef{call: c, leg: x.transferor.leg, xfer: x, side: -1})
	var status int
	if x.kind == TransferAttended {
		status = c.attend(x, job)
	} else {
		status = c.blind(x, job)
	}
	if status != sip.StatusOK {
		c.transferEvent(x, job, status)
		if x.a.ended() || x.transferor.ended() {
			// Asterisk ends a failed transfer's call once either party is
			// gone: nobody is left to take the transferee back.
			job.notify(status, true)
			x.a.hangup()
			x.transferor.hangup()
			c.finish(calls.CauseAnswered, sip.StatusOK, "transfer failed")
			return true
		}
		// The call goes on: the transferor may try again once told. The
		// transferee hears it again (not a failed target's early media).
		if err := rtpcore.Bridge(x.a.media(), x.transferor.media()); err != nil {
			c.log.Debug("bridge back after a failed transfer", "err", err)
		}
		c.m.addDialog(x.transferor.dialogID(), dialogRef{call: c, leg: x.transferor.leg})
		job.notify(status, true)
		return false
	}
	// Music on hold stops: the joined parties hear each other (moh.go).
	c.dropHold()
	if x.other != nil {
		x.other.dropHold()
	}
	// The joined parties' requests (a BYE right after the NOTIFY) are the
	// transfer's from now on; the transferor's session timer stops, the
	// new leg's starts.
	x.register()
	x.transferor.stopTimer()
	if x.b.c == c && x.b.leg != nil {
		c.armTimer(x.b.leg)
	}
	c.transferEvent(x, job, status)
	job.notify(sip.StatusOK, true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-x.transferor.done():
			return
		case <-time.After(transferorGrace):
		case <-x.done:
		}
		x.transferor.markEnded()
		x.transferor.hangup()
	}()
	reason := c.runJoined(x)
	wg.Wait()
	c.finish(calls.CauseAnswered, sip.StatusOK, reason)
	return true
}

// blind routes the Refer-To target as a new call from the transferor and
// rings it; on answer the transferee is joined to the new leg. It returns
// 200 or the failure status for the final NOTIFY.
func (c *Call) blind(x *transfer, job transferJob) int {
	in := c.transferInbound(x, job)
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	dec := c.m.opts.Router.Route(ctx, in)
	cancel()
	if dec.Reject != nil || dec.Target == nil {
		if dec.Reject != nil {
			c.log.Info("transfer refused", "to", job.target.User, "status", dec.Reject.Status, "err", dec.Reject.Err)
			return dec.Reject.Status
		}
		return sip.StatusNotFound
	}
	n, status := c.dialTransfer(x, job, dec.Target)
	if n == nil {
		return status
	}
	x.b = party{c: c, leg: n}
	x.codecs = c.negotiated()
	if c.held() {
		x.held = x.a
	}
	c.mu.Lock()
	if x.a.leg == nil {
		// The caller stays: the new leg answers for the call.
		c.winner = n
		c.info.AnsweredBy = n.target.Extension
	}
	c.mu.Unlock()
	if err := rtpcore.Bridge(x.a.media(), n.media); err != nil {
		c.log.Warn("bridge transfer", "err", err)
	}
	return sip.StatusOK
}

// attend joins the transferee with the other call's far party (RFC 5589
// section 7.2, done inside the PBX): the other call hands it over and ends.
func (c *Call) attend(x *transfer, job transferJob) int {
	o := x.other
	o.mu.Lock()
	ow := o.winner
	o.mu.Unlock()
	if ow == nil || job.handoff.ended() || (job.handoff.leg != nil && job.handoff.leg != ow) || c.m.transferring(o, x) {
		return sip.StatusCallTransactionDoesNotExists
	}
	x.b = party{c: o, leg: ow}
	if job.handoff.leg != nil {
		x.b = party{c: o}
	}
	x.codecs = c.negotiated()
	if c.held() {
		x.held = x.a
	}
	// C's requests reach this transfer from now on.
	c.m.addDialog(x.b.dialogID(), dialogRef{call: c, leg: x.b.leg, xfer: x, side: 1})
	select {
	case o.transferJobs <- transferJob{x: x, handoff: job.handoff}:
		o.wake()
	default:
		c.m.addDialog(x.b.dialogID(), dialogRef{call: o, leg: x.b.leg})
		return sip.StatusServiceUnavailable
	}
	if err := rtpcore.Bridge(x.a.media(), x.b.media()); err != nil {
		c.log.Warn("bridge transfer", "err", err)
	}
	return sip.StatusOK
}

// handOff ends this call for an attended transfer: its transferor side
// gets BYE, its record ends ("transferred") and its media stays open for
// the joined party until the transfer's call ends.
//
// The call's record ends now, but the call itself only once the joined
// call ended: the joined party's session timer (RFC 4028) still runs
// here, and its expiry ends the joined call.
func (c *Call) handOff(job transferJob) bool {
	c.mediaKept.Store(true)
	at := time.Now()
	job.handoff.stopTimer()
	job.handoff.hangup()
	for done := false; !done; {
		select {
		case <-job.x.done:
			done = true
		case why := <-c.endCh:
			if why != "bye" { // not the handed-off phone's own BYE
				job.x.owner.requestEnd(why)
			}
		}
	}
	c.finishAt(at, calls.CauseAnswered, sip.StatusOK, "transferred")
	if c.session != nil {
		_ = c.session.Close()
	}
	return true
}

// transferInbound is the Router's view of a blind transfer's new leg: a
// call from the transferor's identity to the Refer-To URI.
func (c *Call) transferInbound(x *transfer, job transferJob) *Inbound {
	info := c.Info()
	caller := info.Caller
	from := sip.Uri{Scheme: "sip", User: x.transferor.name(), Host: info.Meta.Domain}
	if l := x.transferor.leg; l != nil {
		caller = Caller{Kind: l.target.Kind, Tenant: info.Tenant, Extension: l.target.Extension}
		if l.target.Kind == KindTrunk {
			caller.Trunk = l.target.Name
		}
	} else if f := c.invite.From(); f != nil {
		from = f.Address
	}
	target := job.target
	target.Headers = nil
	return &Inbound{
		ID: c.id, SIPCallID: info.SIPCallID, Caller: caller, From: from, To: target, RequestURI: target,
		Source: srcOf(job.refer), Transport: strings.ToLower(job.refer.Transport()), Request: job.refer,
		Transfer: &Transfer{Kind: x.kind, By: x.transferor.name(), To: target.User},
	}
}

// transferEvent tells the observer how a transfer ended.
func (c *Call) transferEvent(x *transfer, job transferJob, status int) {
	t := &Transfer{Kind: x.kind, By: x.transferor.name(), To: job.target.User, SIPStatus: status, Result: calls.CauseAnswered}
	if x.kind == TransferAttended && x.b.valid() {
		t.To = x.b.name()
	}
	if status != sip.StatusOK {
		t.Result = legCause(status)
	}
	c.evMu.Lock()
	defer c.evMu.Unlock()
	c.mu.Lock()
	ev := Event{Kind: EventTransfer, At: time.Now(), Call: c.snapshotLocked(), Transfer: t}
	c.mu.Unlock()
	c.m.observe(ev)
}
