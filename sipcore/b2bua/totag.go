package b2bua

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"

	"github.com/emiago/sipgo"
	"github.com/emiago/sipgo/sip"
)

// toTagKey keys initialToTag: the tags are stable within the process and
// unpredictable to anyone else.
var toTagKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand panics instead)
	return k
}()

// initialToTag is the To tag of every response the PBX gives an initial
// INVITE (no To tag) of one Call-ID and From tag: a challenge (401/407), a
// 420 or 422 the caller retries after, the provisional and 2xx responses of
// the call it answers, so that the dialog's tag is also the challenge's.
//
// A caller's retry after a challenge is a new transaction, and sipgo would
// give each response a fresh tag; a UAC that takes the To tag of the last
// response it received (SIPp's [peer_tag_param] does) then builds its BYE
// with the challenge's tag when a retransmission of the challenge reaches
// it after the 2xx — one whose ACK was late or lost under load, answered
// again by Timer G — and the PBX answered that BYE 481 and kept the call
// until its media timeout. With one tag for the Call-ID and From tag, a
// late challenge changes nothing.
func initialToTag(req *sip.Request) string {
	callID, from := req.CallID(), req.From()
	if callID == nil || from == nil {
		return ""
	}
	fromTag, _ := from.Params.Get("tag")
	mac := toTagMACs.Get().(hash.Hash)
	mac.Reset()
	mac.Write([]byte(callID.Value()))
	mac.Write([]byte{0})
	mac.Write([]byte(fromTag))
	var sum [sha256.Size]byte
	tag := hex.EncodeToString(mac.Sum(sum[:0])[:16])
	toTagMACs.Put(mac)
	return tag
}

// toTagMACs keeps initialToTag's keyed hashes for reuse: each response to
// an initial INVITE needs the tag, and a fresh HMAC is several allocations.
var toTagMACs = sync.Pool{New: func() any { return hmac.New(sha256.New, toTagKey) }}

// tagInitial gives res, a response to the initial INVITE req, the To tag
// of initialToTag, and returns it.
func tagInitial(req *sip.Request, res *sip.Response) *sip.Response {
	if res == nil || hasToTag(req) {
		return res
	}
	if to := res.To(); to != nil && res.StatusCode != sip.StatusTrying {
		if tag := initialToTag(req); tag != "" {
			to.Params.Add("tag", tag)
		}
	}
	return res
}

// adoptInitialToTag makes the dialog ds, just read from the initial INVITE
// req, use initialToTag instead of the tag sipgo drew for it: ds's later
// responses (built from its InviteRequest) and its ID follow. A dialog of
// that id still live (the same INVITE reaching the PBX twice by two paths)
// keeps it: ds then keeps sipgo's tag.
func (m *Manager) adoptInitialToTag(req *sip.Request, ds *sipgo.DialogServerSession) error {
	tag := initialToTag(req)
	if tag == "" {
		return nil
	}
	to := ds.InviteRequest.To()
	if to == nil {
		return nil
	}
	drawn, _ := to.Params.Get("tag")
	to.Params.Add("tag", tag)
	id, err := sip.DialogIDFromRequestUAS(ds.InviteRequest)
	if err != nil {
		return err
	}
	m.mu.Lock()
	_, taken := m.dialogs[id]
	m.mu.Unlock()
	if taken {
		to.Params.Add("tag", drawn)
		return nil
	}
	ds.ID = id
	return nil
}

// retransmittedInvite reports whether req, an initial INVITE, is a
// retransmission of the INVITE of a call still up: the same Call-ID, From
// tag, CSeq and branch. The INVITE's server transaction absorbs such
// retransmissions only until sipcore.CompletedLinger after its 2xx (Timer
// L); one that arrives later (a caller that heard nothing for that long)
// would otherwise start the call a second time. The call's dialog is
// found under initialToTag, the tag its 2xx carried.
func (m *Manager) retransmittedInvite(req *sip.Request) bool {
	callID, from, via, cseq := req.CallID(), req.From(), req.Via(), req.CSeq()
	if callID == nil || from == nil || via == nil || cseq == nil {
		return false
	}
	fromTag, _ := from.Params.Get("tag")
	id := sip.DialogIDMake(string(*callID), initialToTag(req), fromTag)
	m.mu.Lock()
	ref, ok := m.dialogs[id]
	m.mu.Unlock()
	if !ok || ref.leg != nil {
		return false
	}
	orig := ref.call.invite
	ov, oc := orig.Via(), orig.CSeq()
	if ov == nil || oc == nil || oc.SeqNo != cseq.SeqNo {
		return false
	}
	branch, _ := via.Params.Get("branch")
	origBranch, _ := ov.Params.Get("branch")
	return branch != "" && branch == origBranch
}
