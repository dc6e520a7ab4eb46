package b2bua

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/rtpcore"
)

// DTMF interworking. A digit keeps the form the receiving far end
// negotiated, as Asterisk's chan_pjsip does with dtmf_mode=auto_info: a far
// end with telephone-event in its SDP gets RFC 4733 events, one without
// gets SIP INFO (application/dtmf-relay). INFO from one side therefore
// becomes RFC 4733 on the other when it can, and RFC 4733 becomes INFO
// toward a far end that cannot take events. Every digit the caller sends,
// either way, is kept on the call (CallInfo.Digits).

// Content types of DTMF in SIP INFO: Cisco's application/dtmf-relay
// (Signal= and Duration= lines, the de facto standard) and the bare digit
// of application/dtmf.
const (
	ctDTMFRelay = "application/dtmf-relay"
	ctDTMF      = "application/dtmf"
)

// DTMF durations: the default when an INFO gives none, and the bounds a
// generated event is kept within.
const (
	defaultDTMFDuration = 160 * time.Millisecond
	minDTMFDuration     = 40 * time.Millisecond
	maxDTMFDuration     = 2 * time.Second
	// dtmfPacketInterval paces generated RFC 4733 packets: one per 20 ms
	// audio frame (RFC 4733 section 2.5.1.2 lets events follow the audio
	// packetisation).
	dtmfPacketInterval = 20 * time.Millisecond
	// dtmfClockRate is telephone-event's clock in the PBX's offers.
	dtmfClockRate = 8000
	// dtmfQueue bounds the digits waiting for the interworking goroutine.
	dtmfQueue = 32
)

// Digit is one DTMF digit the caller sent during the call.
type Digit struct {
	Digit string    `json:"digit"` // 0-9, *, #, A-D
	At    time.Time `json:"at"`
	Via   string    `json:"via"` // DigitViaRTP or DigitViaINFO
}

// How a digit arrived.
const (
	DigitViaRTP  = "rfc4733"
	DigitViaINFO = "info"
)

// dtmfIn is a digit a far end sent as RFC 4733, seen by a tap.
type dtmfIn struct {
	fromCaller bool
	digit      rune
	at         time.Time
}

// parseDTMFInfo reads the digit and duration of an INFO body of content
// type ct. ok is false for other content.
func parseDTMFInfo(ct string, body []byte) (rune, time.Duration, bool) {
	ct = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	if ct != ctDTMFRelay && ct != ctDTMF {
		return 0, 0, false
	}
	text := strings.TrimSpace(string(body))
	dur := defaultDTMFDuration
	signal := ""
	if ct == ctDTMF && !strings.Contains(text, "=") {
		signal = text
	} else {
		for _, line := range strings.Split(text, "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
			switch k {
			case "signal":
				signal = v
			case "duration":
				if ms, err := strconv.Atoi(v); err == nil && ms > 0 {
					dur = time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	if n, err := strconv.Atoi(signal); err == nil && n >= 10 && n <= 15 {
		// Some phones send the RFC 4733 event code for * # A-D.
		d, _ := rtpcore.DigitOf(uint8(n))
		return d, clampDTMF(dur), true
	}
	if len(signal) != 1 {
		return 0, 0, false
	}
	ev, ok := rtpcore.EventOf(rune(signal[0]))
	if !ok {
		return 0, 0, false
	}
	d, _ := rtpcore.DigitOf(ev)
	return d, clampDTMF(dur), true
}

// dtmfRelayBody is the application/dtmf-relay body of digit lasting dur.
func dtmfRelayBody(digit rune, dur time.Duration) []byte {
	return fmt.Appendf(nil, "Signal=%c\r\nDuration=%d\r\n", digit, dur/time.Millisecond)
}

func clampDTMF(d time.Duration) time.Duration {
	return min(max(d, minDTMFDuration), maxDTMFDuration)
}

// addDigit keeps a digit the caller sent on the call.
func (c *Call) addDigit(d rune, at time.Time, via string) {
	c.mu.Lock()
	c.info.Digits = append(c.info.Digits, Digit{Digit: string(d), At: at, Via: via})
	c.mu.Unlock()
}

// startDTMF taps both bridged legs for RFC 4733 events, which record the
// caller's digits and turn events into INFO toward a far end without
// telephone-event, until the call ends. A goroutine runs only while digits
// wait (dtmfWork): a held call without DTMF keeps none (one per call cost
// about 8 kB of stack).
func (c *Call) startDTMF(w *outLeg) {
	q := &dtmfWork{}
	tap := func(leg *rtpcore.Leg, fromCaller bool) func() {
		return leg.AddEventTap(dtmfTap(leg.TelephoneEventPT, func(d rune, at time.Time) {
			c.queueDTMF(q, w, dtmfIn{fromCaller: fromCaller, digit: d, at: at})
		}))
	}
	removeCaller := tap(c.callerLeg, true)
	removeCallee := tap(w.media, false)
	c.mu.Lock()
	c.dtmfStop = func() { removeCaller(); removeCallee() }
	c.mu.Unlock()
	select {
	case <-c.done:
		c.stopDTMF() // the call ended meanwhile; finishAt may have missed it
	default:
	}
}

// dtmfTap feeds a detector of its own the packets of the telephone-event
// payload type pt reports (none while it is negative) and calls on with
// each digit they start. It is attached with AddEventTap, so the relay
// shows it telephone events only: audio, nearly every packet, costs it
// nothing (issue 16: the tap on both legs of 1,000 held calls, called for
// every packet, was ~3% of the relay thread's samples). Any audio packet
// shown to it anyway returns after the comparison without touching the
// detector (BenchmarkDTMFTapAudio).
func dtmfTap(pt func() int, on func(digit rune, at time.Time)) rtpcore.TapFunc {
	det := rtpcore.NewDTMFDetector(0)
	return func(p *rtpcore.Packet) {
		te := pt()
		if te < 0 || int(p.Header.PayloadType) != te&0x7f {
			return
		}
		det.SetPayloadType(uint8(te))
		if d, ok := det.Feed(&p.Header, p.Payload()); ok {
			on(d, p.At)
		}
	}
}

// stopDTMF removes the taps startDTMF attached (once).
func (c *Call) stopDTMF() {
	c.mu.Lock()
	stop := c.dtmfStop
	c.dtmfStop = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// dtmfWork is a call's queue of RFC 4733 digits and whether a goroutine
// drains it.
type dtmfWork struct {
	mu      sync.Mutex
	queue   []dtmfIn
	running bool
}

// queueDTMF queues a digit (dropped past dtmfQueue) and starts the
// goroutine that handles the queue unless it runs; the goroutine ends when
// the queue is empty or the call is over.
func (c *Call) queueDTMF(q *dtmfWork, w *outLeg, in dtmfIn) {
	q.mu.Lock()
	if len(q.queue) >= dtmfQueue {
		q.mu.Unlock()
		return
	}
	q.queue = append(q.queue, in)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if !start {
		return
	}
	c.m.wg.Add(1)
	go func() {
		defer c.m.wg.Done()
		for {
			q.mu.Lock()
			ended := false
			select {
			case <-c.done:
				ended = true
			default:
			}
			if ended || len(q.queue) == 0 {
				q.queue, q.running = nil, false
				q.mu.Unlock()
				return
			}
			in := q.queue[0]
			q.queue = q.queue[1:]
			q.mu.Unlock()
			c.interworkEvent(w, in)
		}
	}()
}

// interworkEvent handles an RFC 4733 digit: the caller's is recorded; it
// goes on as INFO when the other far end has no telephone-event (else the
// relay already carried the event, with the payload type translated).
func (c *Call) interworkEvent(w *outLeg, in dtmfIn) {
	if in.fromCaller {
		c.addDigit(in.digit, in.at, DigitViaRTP)
	}
	to := w.media
	if !in.fromCaller {
		to = c.callerLeg
	}
	if to.TelephoneEventPT() >= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), reinviteTimeout)
	defer cancel()
	if _, err := c.sendInfo(ctx, !in.fromCaller, w, ctDTMFRelay, dtmfRelayBody(in.digit, defaultDTMFDuration)); err != nil {
		c.log.Debug("dtmf info not sent", "err", err)
	}
}

// infoDTMF handles an INFO carrying DTMF from one side: the caller's digit
// is recorded, and the other far end gets it as RFC 4733 events when it
// negotiated telephone-event. It reports false when the INFO is to be
// relayed as it is (no telephone-event there, or another injection, music
// on hold say, holds the leg).
func (c *Call) infoDTMF(req *sip.Request, fromCaller bool, w *outLeg) bool {
	ct := req.ContentType()
	if ct == nil {
		return false
	}
	d, dur, ok := parseDTMFInfo(ct.Value(), req.Body())
	if !ok {
		return false
	}
	if fromCaller {
		c.addDigit(d, time.Now(), DigitViaINFO)
	}
	to := w.media
	if !fromCaller {
		to = c.callerLeg
	}
	pt := to.TelephoneEventPT()
	if pt < 0 {
		return false
	}
	c.dtmfOut.Lock()
	defer c.dtmfOut.Unlock()
	if err := playDTMF(to, uint8(pt), d, dur); err != nil {
		c.log.Debug("dtmf events not generated", "err", err)
		return false
	}
	return true
}

// playDTMF sends one digit lasting dur toward leg's far end as RFC 4733
// events on payload type pt (section 2.5.1): packets every 20 ms sharing
// the event's timestamp, the first with the marker bit, the duration
// growing, then the end packet sent three times (section 2.5.1.4).
func playDTMF(leg *rtpcore.Leg, pt uint8, digit rune, dur time.Duration) error {
	samples := uint16(dur * dtmfClockRate / time.Second)
	step := uint16(dtmfPacketInterval * dtmfClockRate / time.Second)
	pkts, err := rtpcore.DTMFPackets(digit, samples, step)
	if err != nil {
		return fmt.Errorf("dtmf %q: %w", digit, err)
	}
	inj, err := leg.Inject(pt)
	if err != nil {
		return fmt.Errorf("dtmf %q: %w", digit, err)
	}
	defer inj.Close()
	tick := time.NewTicker(dtmfPacketInterval)
	defer tick.Stop()
	for i, p := range pkts {
		if i > 0 {
			<-tick.C
		}
		adv := uint32(0)
		if i == len(pkts)-1 {
			// The next event (or audio) starts after this one.
			adv = uint32(samples)
		}
		if err := inj.WriteEvent(pt, p, i == 0, adv); err != nil {
			return fmt.Errorf("dtmf %q: %w", digit, err)
		}
	}
	return nil
}
