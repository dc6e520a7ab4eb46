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

// holdState is which sides of an answered call hold, and what the PBX
// sends toward each side instead of the relayed audio.
type holdState struct {
	mu               sync.Mutex
	caller, callee   bool       // the side holds (its last offer was a hold)
	toCaller, toCall *holdFeed  // nil: relay as usual
	feeds            sync.Mutex // serialises start and stop of feeds
}

// holdFeed replaces the relayed audio toward one side: music (a looped
// player) toward a held party, nothing toward a party that holds.
type holdFeed struct {
	music  bool
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

// holdOffer answers an offer (re-INVITE or UPDATE) from one side locally
// when music on hold is on and the offer holds, or the call is held: the
// other party is not involved. It reports false when the offer is to be
// handled as before (relayed, for a re-INVITE).
func (c *Call) holdOffer(req *sip.Request, fromCaller bool, w *outLeg) (*sip.Response, bool) {
	if c.m.opts.MusicOnHold == nil || len(req.Body()) == 0 {
		return nil, false
	}
	offer, err := sdp.Parse(req.Body())
	if err != nil {
		return nil, false
	}
	c.hold.mu.Lock()
	anyHeld := c.hold.caller || c.hold.callee
	c.hold.mu.Unlock()
	if !offer.Hold() && !anyHeld {
		return nil, false
	}
	media, origin, ep := c.callerLeg, c.callerOrig, c.callerEP
	if !fromCaller {
		media, origin, ep = w.media, w.origin, w.ep
	}
	// The answer mirrors the offer (RFC 3264 section 6.1: sendonly is
	// answered recvonly, inactive inactive) with the codecs already agreed:
	// the relay does not transcode once the hold ends.
	body, _, err := origin.Answer(offer, c.mediaAddr, media.Port(), c.negotiated(), "")
	if err != nil {
		return sipcore.Response(req, sip.StatusNotAcceptableHere), true
	}
	media.ApplySDP(offer)
	c.setSideHold(fromCaller, offer.Hold(), w)
	return sdpResponse(req, body, ep.Contact), true
}

// setSideHold records that one side holds (or no longer does) and sets
// what each side receives: a side that holds gets nothing, a side the
// other holds gets music, else the relay runs. CallInfo.Held is set while
// either side holds.
func (c *Call) setSideHold(caller, hold bool, w *outLeg) {
	c.hold.feeds.Lock()
	defer c.hold.feeds.Unlock()
	c.hold.mu.Lock()
	if caller {
		c.hold.caller = hold
	} else {
		c.hold.callee = hold
	}
	byCaller, byCallee := c.hold.caller, c.hold.callee
	c.hold.mu.Unlock()
	if w == nil {
		c.mu.Lock()
		w = c.winner
		c.mu.Unlock()
	}
	if w != nil {
		c.hold.toCaller = c.feed(c.hold.toCaller, c.callerLeg, byCaller, byCallee, false, w)
		c.hold.toCall = c.feed(c.hold.toCall, w.media, byCallee, byCaller, true, w)
	}
	c.setHoldState(byCaller || byCallee)
}

// feed brings the feed toward leg (the caller's, or the callee's when
// holderIsCaller) to what the hold state asks: nothing while the leg's
// party holds (its answer said recvonly or inactive), music while the
// other party holds, relay otherwise. It returns the new feed.
func (c *Call) feed(cur *holdFeed, leg *rtpcore.Leg, holds, held, holderIsCaller bool, w *outLeg) *holdFeed {
	switch {
	case holds:
		if cur != nil && !cur.music {
			return cur
		}
		cur.stop()
		return c.startFeed(leg, nil, 0)
	case held:
		if cur != nil && cur.music {
			return cur
		}
		cur.stop()
		pcm := c.m.opts.MusicOnHold.Music(c.Info(), holderIsCaller)
		if len(pcm) == 0 {
			pcm = silence
		}
		pt, ok := c.musicPT(w)
		if !ok {
			c.log.Info("no G.711 codec on the call: the held party hears nothing")
			return c.startFeed(leg, nil, 0)
		}
		return c.startFeed(leg, pcm, pt)
	default:
		cur.stop()
		return nil
	}
}

// startFeed opens an injection toward leg, which stops the relay toward
// it, and loops pcm into it as payload type pt until stopped or the call
// ends; with pcm nil it sends nothing. The first packet carries the
// marker bit, and sequence numbers and timestamps continue the leg's
// earlier injections (rtpcore.Injection).
func (c *Call) startFeed(leg *rtpcore.Leg, pcm []int16, pt uint8) *holdFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &holdFeed{music: pcm != nil, cancel: cancel, done: make(chan struct{})}
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	inj, err := leg.Inject(pt)
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
		if err := rtpcore.Play(ctx, inj, p, p.Ptime()); err != nil && ctx.Err() == nil {
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

// musicPT is the payload type music is played in: the first G.711 codec
// the answering party accepted (what flows on both legs, as the relay
// does not transcode), else the first of the call's codecs.
func (c *Call) musicPT(w *outLeg) (uint8, bool) {
	codecs := c.negotiated()
	if w != nil && w.dialog != nil && w.dialog.InviteResponse != nil {
		if ans, err := sdp.Parse(w.dialog.InviteResponse.Body()); err == nil && len(ans.Codecs) > 0 {
			codecs = ans.Codecs
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

// dropHold stops the hold feeds of both sides and forgets who held, as a
// transfer joins a party to someone else: the relay it sets up must be
// heard. CallInfo.Held stays until the transfer resumes the party.
func (c *Call) dropHold() {
	c.hold.feeds.Lock()
	defer c.hold.feeds.Unlock()
	c.hold.mu.Lock()
	c.hold.caller, c.hold.callee = false, false
	c.hold.mu.Unlock()
	c.hold.toCaller.stop()
	c.hold.toCall.stop()
	c.hold.toCaller, c.hold.toCall = nil, nil
}

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
	res, ok := c.holdOffer(req, leg == nil, w)
	if !ok {
		return nil
	}
	if res.IsSuccess() {
		c.refreshed(leg, req, res)
	}
	return res
}
