package b2bua

import (
	"context"
	"fmt"
	"sync"
	"time"

	"pbx/rtpcore"
)

const (
	// frameSamples is one 20 ms frame at 8 kHz.
	frameSamples = 160
	// framePtime is a frame's duration.
	framePtime = 20 * time.Millisecond
	// listenBacklog is how many frames (2 s) a slow Listen reader may
	// leave behind before the oldest are dropped.
	listenBacklog = 100
	// listenQueue bounds the packets between the relay's tap and the
	// Listen time line.
	listenQueue = 64
	// listenAhead is how far (1 s of samples) a packet may lie ahead of
	// the time line before the time line is re-anchored to it.
	listenAhead = 8000
	// listenSlack is how far ahead of the frame due (60 ms) a packet is
	// placed when the time line is anchored to it: a packet up to that
	// much later than its predecessors' pace still lands in its frame.
	listenSlack = 3 * frameSamples
)

// appChannel is the Channel of a local application: one Injection on the
// caller's leg, held for the whole call and paced every 20 ms, carries
// the played audio and silence in between, so sequence numbers and
// timestamps run on without a break across Plays (nothing is sent while
// the caller holds the call).
type appChannel struct {
	c      *Call
	a      *appRun
	src    *appSource
	playMu sync.Mutex    // one Play at a time
	pacing chan struct{} // closed when the pacer stopped (the call ended)
}

func newAppChannel(c *Call, a *appRun, pt uint8) *appChannel {
	return &appChannel{c: c, a: a, src: &appSource{pt: pt}, pacing: make(chan struct{})}
}

// startPacer sends one frame every 20 ms toward the caller until ctx ends
// or the leg closes.
func (ch *appChannel) startPacer(ctx context.Context) {
	c := ch.c
	inj, err := c.callerLeg.Inject(ch.src.pt)
	if err != nil {
		c.log.Warn("local application cannot send audio", "err", err)
		close(ch.pacing)
		return
	}
	c.m.wg.Add(1)
	go func() {
		defer c.m.wg.Done()
		defer close(ch.pacing)
		defer inj.Close()
		if err := ch.pace(ctx, inj); err != nil && ctx.Err() == nil {
			c.log.Debug("local application audio stopped", "err", err)
		}
	}()
}

// pace sends the source's frames on the wall clock until ctx ends. While
// the caller holds the call (its offer was sendonly or inactive, so the
// PBX answered that it sends nothing, RFC 3264 section 6.1) and when the
// pacer fell more than maxCatchUp frames behind, frames are consumed and
// their time skipped without sending: the timestamps still follow the
// clock and the sequence numbers show no loss.
func (ch *appChannel) pace(ctx context.Context, inj *rtpcore.Injection) error {
	const maxCatchUp = 3
	buf := make([]byte, 0, 2*frameSamples)
	start := time.Now()
	var sent int64
	tick := time.NewTicker(framePtime)
	defer tick.Stop()
	for {
		due := int64(time.Since(start)/framePtime) + 1
		for ; sent < due; sent++ {
			p, n, _ := ch.src.NextFrame(buf)
			if due-sent > maxCatchUp || ch.c.held() {
				inj.Skip(n)
				continue
			}
			if err := inj.Write(p, n); err != nil {
				return fmt.Errorf("local application audio: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Call returns a snapshot of the call.
func (ch *appChannel) Call() CallInfo { return ch.c.Info() }

// Digits delivers the caller's DTMF.
func (ch *appChannel) Digits() <-chan rune { return ch.a.digits }

// HideDigits keeps later digits off the call record.
func (ch *appChannel) HideDigits() { ch.a.hidden.Store(true) }

// Done is closed when the call has ended.
func (ch *appChannel) Done() <-chan struct{} { return ch.c.done }

// Play hands pcm to the pacer and waits until its last frame was sent.
func (ch *appChannel) Play(ctx context.Context, pcm []int16) error {
	ch.playMu.Lock()
	defer ch.playMu.Unlock()
	select {
	case <-ch.c.done:
		return ErrHungUp
	case <-ch.pacing:
		return ErrHungUp
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(pcm) == 0 {
		return nil
	}
	j := &playJob{pcm: pcm, done: make(chan struct{})}
	ch.src.start(j)
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		ch.src.drop(j)
		return ctx.Err()
	case <-ch.c.done:
		ch.src.drop(j)
		return ErrHungUp
	case <-ch.pacing:
		ch.src.drop(j)
		return ErrHungUp
	}
}

// playJob is one Play's audio and how far the pacer got.
type playJob struct {
	pcm  []int16
	pos  int
	done chan struct{} // closed once the last frame was taken
}

// appSource is the pacer's rtpcore.Source: the current Play's frames,
// G.711 coded, or silence. It never ends.
type appSource struct {
	pt  uint8
	mu  sync.Mutex
	job *playJob
}

func (s *appSource) start(j *playJob) {
	s.mu.Lock()
	s.job = j
	s.mu.Unlock()
}

func (s *appSource) drop(j *playJob) {
	s.mu.Lock()
	if s.job == j {
		s.job = nil
	}
	s.mu.Unlock()
}

// NextFrame encodes the next 160 samples of the current Play (the last
// frame padded with silence), or a frame of silence.
func (s *appSource) NextFrame(dst []byte) ([]byte, uint32, error) {
	dst = dst[:0]
	s.mu.Lock()
	if j := s.job; j != nil {
		n := min(frameSamples, len(j.pcm)-j.pos)
		dst, _ = rtpcore.Encode(s.pt, dst, j.pcm[j.pos:j.pos+n])
		j.pos += n
		if j.pos >= len(j.pcm) {
			s.job = nil
			close(j.done)
		}
	}
	s.mu.Unlock()
	sil := rtpcore.Silence(s.pt)
	for len(dst) < frameSamples {
		dst = append(dst, sil)
	}
	return dst, frameSamples, nil
}

// rtpIn is an audio packet the caller sent, copied off the relay.
type rtpIn struct {
	pt      uint8
	seq     uint16
	ts      uint32
	ssrc    uint32
	payload []byte
}

// Listen delivers the caller's audio on a wall-clock time line.
func (ch *appChannel) Listen() (<-chan []int16, func()) {
	c := ch.c
	out := make(chan []int16, listenBacklog)
	in := make(chan rtpIn, listenQueue)
	remove := c.callerLeg.AddTap(rtpcore.TapFunc(func(p *rtpcore.Packet) {
		if p.Dir != rtpcore.In {
			return
		}
		pt := p.Header.PayloadType
		if pt != rtpcore.PayloadPCMA && pt != rtpcore.PayloadPCMU {
			return
		}
		x := rtpIn{pt: pt, seq: p.Header.Sequence, ts: p.Header.Timestamp, ssrc: p.Header.SSRC, payload: append([]byte(nil), p.Payload()...)}
		select {
		case in <- x:
		default:
		}
	}))
	stopCh := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(stopCh) }) }
	c.m.wg.Add(1)
	go func() {
		defer c.m.wg.Done()
		defer close(out)
		defer remove()
		var tl timeline
		start := time.Now()
		emitted := int64(0)
		tick := time.NewTicker(framePtime)
		defer tick.Stop()
		for {
			select {
			case <-stopCh:
				return
			case <-c.done:
				// The call is over: the audio that arrived is delivered,
				// not lost with it.
				flushListen(in, &tl, out)
				return
			case p := <-in:
				tl.put(p)
			case now := <-tick.C:
				// As many frames as wall-clock time says, whatever ticks
				// a busy scheduler lost.
				for due := int64(now.Sub(start) / framePtime); emitted < due; emitted++ {
					deliverFrame(out, tl.frame())
				}
			}
		}
	}()
	return out, stop
}

// flushListen places the packets still queued and delivers every frame
// the time line holds.
func flushListen(in chan rtpIn, tl *timeline, out chan []int16) {
	for drained := false; !drained; {
		select {
		case p := <-in:
			tl.put(p)
		default:
			drained = true
		}
	}
	for len(tl.buf) > 0 {
		deliverFrame(out, tl.frame())
	}
}

// deliverFrame queues f, dropping the oldest frame when the reader left
// listenBacklog behind.
func deliverFrame(out chan []int16, f []int16) {
	select {
	case out <- f:
		return
	default:
	}
	select {
	case <-out:
	default:
	}
	select {
	case out <- f:
	default:
	}
}

// timeline places the caller's decoded audio on the frames Listen
// emits. The first packet (and a new SSRC) is anchored listenSlack
// ahead of the next frame due; later packets go where their timestamp
// says. A packet whose place already passed is dropped when it is a
// duplicate or reordered (not newer than the newest sequence number
// seen); a newer one means the sender's clock fell behind the wall clock
// (a pause without a timestamp jump, or a burst of lateness) and
// re-anchors the time line listenSlack ahead of it, as a packet more than
// a second ahead re-anchors it to the next frame due.
type timeline struct {
	started bool
	ssrc    uint32
	offset  uint32 // added to the sender's timestamps
	due     uint32 // timestamp (after offset) of the next frame due
	maxSeq  uint16
	buf     []int16 // samples from next on; zero is silence
}

func (t *timeline) put(p rtpIn) {
	samples, ok := rtpcore.Decode(p.pt, nil, p.payload)
	if !ok || len(samples) == 0 {
		return
	}
	if !t.started || p.ssrc != t.ssrc {
		t.started, t.ssrc = true, p.ssrc
		t.offset = t.due + listenSlack - p.ts
		t.maxSeq = p.seq - 1
		t.buf = t.buf[:0]
	}
	newer := int16(p.seq-t.maxSeq) > 0
	if newer {
		t.maxSeq = p.seq
	}
	d := int64(int32(p.ts + t.offset - t.due))
	if d < 0 {
		if !newer {
			return
		}
		t.offset += uint32(-d) + listenSlack
		d = listenSlack
	}
	if d+int64(len(samples)) > listenAhead {
		t.offset -= uint32(d)
		d = 0
		t.buf = t.buf[:0]
	}
	end := int(d) + len(samples)
	for len(t.buf) < end {
		t.buf = append(t.buf, 0)
	}
	copy(t.buf[d:], samples)
}

// frame returns the frame due and advances the time line.
func (t *timeline) frame() []int16 {
	f := make([]int16, frameSamples)
	n := copy(f, t.buf)
	t.buf = t.buf[:copy(t.buf, t.buf[n:])]
	t.due += frameSamples
	return f
}
