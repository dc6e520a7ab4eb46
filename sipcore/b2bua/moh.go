package b2bua

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
	"pbx/sipcore"
)

// MusicOnHold chooses what a held party hears (Options.MusicOnHold). When
// it is set, the PBX answers a party's hold itself instead of passing it
// to the other party, and plays the music to the held party through its
// media leg; see the package documentation.
type MusicOnHold interface {
	// Music returns the 8 kHz mono 16-bit PCM looped to the held party
	// of call; byCaller says the caller holds (else the answering party
	// does). Nil or empty means silence. The slice is only read; it may
	// be shared by every call. It must be quick.
	Music(call CallInfo, byCaller bool) []int16
}

// MusicOnHoldFunc adapts a function to MusicOnHold.
type MusicOnHoldFunc func(call CallInfo, byCaller bool) []int16

// Music calls f.
func (f MusicOnHoldFunc) Music(call CallInfo, byCaller bool) []int16 { return f(call, byCaller) }

// silence is what a held party hears when no music is configured: G.711
// silence keeps its RTP flowing (a phone may hang up a call whose RTP
// stopped).
var silence = make([]int16, 160)

// holdState is which sides of a pair of parties hold, and what the PBX
// sends toward each side instead of the relayed audio.
type holdState struct {
	feeds sync.Mutex   // serialises changes of the state and feeds
	mu    sync.Mutex   // guards holds
	holds [2]bool      // side i holds (its last offer was a hold)
	out   [2]*holdFeed // what goes toward side i; nil: the relay
}

// held reports whether either side holds.
func (h *holdState) held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holds[0] || h.holds[1]
}

// holdFeed replaces the relayed audio toward one side: music (a looped
// player) toward a held party, nothing toward a party that holds.
type holdFeed struct {
	music  bool
	inj    *rtpcore.Injection // opened when the feed started; nil: it waited for one
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the feed and waits for it; relaying toward its leg resumes.
func (f *holdFeed) stop() {
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
}

// holdPair is two parties music on hold runs between: a call's caller
// (side 0) and answering party (side 1), or a transfer's joined parties.
type holdPair struct {
	owner  *Call // its end stops the feeds; its record names the class and is held
	h      *holdState
	sides  [2]party
	codecs []sdp.Codec // agreed between the sides
}

// holdPair is the call's caller and its answering leg w.
func (c *Call) holdPair(w *outLeg) holdPair {
	return holdPair{owner: c, h: &c.hold, sides: [2]party{{c: c}, {c: c, leg: w}}, codecs: c.negotiated()}
}

// holdOffer answers an offer (re-INVITE or UPDATE) from side from locally
// when music on hold is on and the offer holds, or the pair is held: the
// other party is not involved. It reports false when the offer is to be
// handled as before (relayed, for a re-INVITE).
func (p holdPair) holdOffer(req *sip.Request, from int) (*sip.Response, bool) {
	if p.owner.m.opts.MusicOnHold == nil || len(req.Body()) == 0 {
		return nil, false
	}
	offer, err := sdp.Parse(req.Body())
	if err != nil {
		return nil, false
	}
	if !offer.Hold() && !p.h.held() {
		return nil, false
	}
	sender := p.sides[from]
	// The answer mirrors the offer (RFC 3264 section 6.1: sendonly is
	// answered recvonly, inactive inactive) with the codecs already agreed:
	// the relay does not transcode once the hold ends.
	body, _, err := sender.origin().Answer(offer, sender.c.mediaAddr, sender.media().Port(), p.codecs, "")
	if err != nil {
		return sipcore.Response(req, sip.StatusNotAcceptableHere), true
	}
	sender.media().ApplySDP(offer)
	p.setHold(from, offer.Hold())
	return sdpResponse(req, body, sender.endpoint().Contact), true
}

// setHold records that side i holds (or no longer does) and sets what
// each side receives: a side that holds gets nothing, a side the other
// holds gets music, else the relay runs. The owner's CallInfo.Held is set
// while either side holds.
func (p holdPair) setHold(i int, hold bool) {
	p.h.feeds.Lock()
	defer p.h.feeds.Unlock()
	p.h.mu.Lock()
	p.h.holds[i] = hold
	holds := p.h.holds
	p.h.mu.Unlock()
	if p.sides[0].valid() && p.sides[1].valid() {
		for k := range 2 {
			p.h.out[k] = p.feed(k, holds[k], holds[1-k])
		}
	}
	p.owner.setHoldState(holds[0] || holds[1])
}

// feed brings the feed toward side k to what the hold state asks: nothing
// while it holds (its answer said recvonly or inactive), music while the
// other side holds, relay otherwise. It returns the new feed.
func (p holdPair) feed(k int, holds, held bool) *holdFeed {
	cur := p.h.out[k]
	c, leg := p.owner, p.sides[k].media()
	switch {
	case holds:
		if cur != nil && !cur.music {
			return cur
		}
		return c.startFeed(leg, nil, 0, cur)
	case held:
		if cur != nil && cur.music {
			return cur
		}
		holder := p.sides[1-k]
		pcm := c.m.opts.MusicOnHold.Music(c.Info(), holder.leg == nil && holder.c == c)
		if len(pcm) == 0 {
			pcm = silence
		}
		pt, ok := p.musicPT(k)
		if !ok {
			c.log.Info("no G.711 codec on the call: the held party hears nothing")
			return c.startFeed(leg, nil, 0, cur)
		}
		return c.startFeed(leg, pcm, pt, cur)
	default:
		cur.stop()
		return nil
	}
}

// drop stops both sides' feeds and forgets who held (a transfer joins the
// parties to others: the relay it sets up must be heard). The owner's
// CallInfo.Held stays until the transfer resumes the party.
func (h *holdState) drop() {
	h.feeds.Lock()
	defer h.feeds.Unlock()
	h.mu.Lock()
	h.holds = [2]bool{}
	h.mu.Unlock()
	for k := range h.out {
		h.out[k].stop()
		h.out[k] = nil
	}
}

// startFeed opens an injection toward leg, which stops the relay toward
// it, and loops pcm into it as payload type pt until stopped or the call
// ends; with pcm nil it sends nothing. The first packet carries the
// marker bit, and sequence numbers and timestamps continue the leg's
// earlier injections (rtpcore.Injection). The feed replaces prev, the
// leg's feed until now (nil: the relay), and stops it: its injection is
// replaced in one step, so that no relayed packet reaches the leg in
// between (the other phone may be sending).
func (c *Call) startFeed(leg *rtpcore.Leg, pcm []int16, pt uint8, prev *holdFeed) *holdFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &holdFeed{music: pcm != nil, cancel: cancel, done: make(chan struct{})}
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var inj *rtpcore.Injection
	err := rtpcore.ErrClosed
	if prev != nil && prev.inj != nil {
		inj, err = prev.inj.Replace(pt)
	}
	prev.stop()
	if err != nil {
		// No feed before, or its injection is gone (the leg closed, or
		// the feed still waited for one).
		inj, err = leg.Inject(pt)
	}
	if err == nil {
		f.inj = inj
	}
	go func() {
		defer close(f.done)
		if err != nil {
			// A DTMF event played toward the leg holds it for a moment:
			// the feed starts once it is over.
			if inj = c.awaitInjection(ctx, leg, pt); inj == nil {
				return
			}
		}
		defer inj.Close()
		if pcm == nil {
			<-ctx.Done()
			return
		}
		p, err := rtpcore.NewPlayer(pcm, rtpcore.PlayerOptions{PayloadType: pt, Loop: true})
		if err != nil {
			c.log.Warn("music on hold", "err", err)
			return
		}
		if err := rtpcore.Play(ctx, inj, p, p.Ptime()); err != nil && ctx.Err() == nil && !errors.Is(err, rtpcore.ErrClosed) {
			c.log.Debug("music on hold ended", "err", err)
		}
	}()
	return f
}

// awaitInjection retries opening an injection toward leg every 20 ms
// while another one holds it, until ctx ends or the leg is closed (nil).
func (c *Call) awaitInjection(ctx context.Context, leg *rtpcore.Leg, pt uint8) *rtpcore.Injection {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		inj, err := leg.Inject(pt)
		switch {
		case err == nil:
			return inj
		case !errors.Is(err, rtpcore.ErrInjecting):
			c.log.Debug("hold feed not started", "leg", leg.Name(), "err", err)
			return nil
		}
	}
}

// musicPT is the payload type music toward side k is played in: the
// first G.711 codec the answering party accepted (what flows on both legs,
// as the relay does not transcode): side k's own answer when it was
// called, else the other side's, else the agreed codecs.
func (p holdPair) musicPT(k int) (uint8, bool) {
	codecs := p.codecs
	for _, s := range []party{p.sides[k], p.sides[1-k]} {
		if s.leg == nil || s.leg.dialog == nil || s.leg.dialog.InviteResponse == nil {
			continue
		}
		if ans, err := sdp.Parse(s.leg.dialog.InviteResponse.Body()); err == nil && len(ans.Codecs) > 0 {
			codecs = ans.Codecs
			break
		}
	}
	for _, k := range codecs {
		switch strings.ToUpper(k.Name) {
		case "PCMU":
			return rtpcore.PayloadPCMU, true
		case "PCMA":
			return rtpcore.PayloadPCMA, true
		}
	}
	return 0, false
}

// dropHold stops the call's hold feeds (transfer.go).
func (c *Call) dropHold() { c.hold.drop() }

// holdUpdate answers an UPDATE with an offer (RFC 3311) from one side
// when music on hold takes it (holdOffer), with the session timer
// refreshed as for an UPDATE without one; nil means it is refused as
// before.
func (c *Call) holdUpdate(m *Manager, req *sip.Request, leg *outLeg) *sip.Response {
	if c.m.opts.MusicOnHold == nil {
		return nil
	}
	if res := m.tooSmall(req); res != nil {
		return res
	}
	c.mu.Lock()
	w := c.winner
	c.mu.Unlock()
	if w == nil || !c.reinvite.TryLock() {
		return sipcore.Response(req, sip.StatusRequestPending)
	}
	defer c.reinvite.Unlock()
	from := 0
	if leg != nil {
		from = 1
	}
	res, ok := c.holdPair(w).holdOffer(req, from)
	if !ok {
		return nil
	}
	if res.IsSuccess() {
		c.refreshed(leg, req, res)
	}
	return res
}

// holdPair is the transfer's joined parties.
func (x *transfer) holdPair() holdPair {
	return holdPair{owner: x.owner, h: &x.hold, sides: [2]party{x.a, x.b}, codecs: x.codecs}
}

// sideOf is p's side in the transfer's holdPair.
func (x *transfer) sideOf(p party) int {
	if p == x.a {
		return 0
	}
	return 1
}

// holdUpdate answers a joined party's UPDATE with an offer: taken by music
// on hold, else refused with 488 as before.
func (x *transfer) holdUpdate(from party, req *sip.Request, tx sip.ServerTransaction) {
	if !x.reinvite.TryLock() {
		respond(tx, req, sip.StatusRequestPending, sipcore.Phrase(sip.StatusRequestPending))
		return
	}
	defer x.reinvite.Unlock()
	res, ok := x.holdPair().holdOffer(req, x.sideOf(from))
	if !ok {
		respond(tx, req, sip.StatusNotAcceptableHere, "Not Acceptable Here")
		return
	}
	if res.IsSuccess() {
		from.c.refreshed(from.leg, req, res)
	}
	_ = tx.Respond(res)
}
