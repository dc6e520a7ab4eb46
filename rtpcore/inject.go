package rtpcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Injection sends the PBX's own RTP toward one leg's far end (music on
// hold, prompts). While it is open, packets relayed toward that leg are
// dropped: the injected stream replaces them. The leg keeps one SSRC for
// all its injections; the sequence number continues from one injection to
// the next and the timestamp advances with wall-clock time in between, so
// the far end sees one continuous stream. An Injection is used by one
// goroutine at a time.
type Injection struct {
	leg    *Leg
	pt     uint8
	buf    []byte
	first  bool
	mu     sync.Mutex
	closed bool
	pkt    Packet
}

// Inject starts an injection toward l's far end with payload type pt
// (the negotiated codec). It returns ErrInjecting if one is active.
func (l *Leg) Inject(pt uint8) (*Injection, error) {
	if l.isClosed() {
		return nil, ErrClosed
	}
	inj := l.newInjection(pt)
	if !l.inj.CompareAndSwap(nil, inj) {
		return nil, ErrInjecting
	}
	l.resetOffload() // the peer's packets toward l are to be replaced
	l.resumeInjecting()
	return inj, nil
}

func (l *Leg) newInjection(pt uint8) *Injection {
	return &Injection{leg: l, pt: pt & 0x7f, buf: make([]byte, 0, maxPacket), first: true}
}

// resumeInjecting advances the timestamp by the wall-clock gap since the
// last injected packet, so the far end's jitter buffer stays sane.
func (l *Leg) resumeInjecting() {
	l.injMu.Lock()
	if l.started {
		gap := time.Since(l.tsWall)
		l.ts += uint32(gap * time.Duration(l.clockRate.Load()) / time.Second)
	}
	l.injMu.Unlock()
}

// Replace ends i and starts, in the same step, an injection toward the
// same leg with payload type pt, as Inject would: no packet relayed in
// between reaches the far end, where Close then Inject leave a moment
// for one (music on hold switching from silence to music while the other
// party's phone still sends). i is closed once Replace returns, also
// when it fails: ErrClosed when i was closed already or the leg is.
func (i *Injection) Replace(pt uint8) (*Injection, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil, ErrClosed
	}
	i.closed = true // no write of i after this one
	l := i.leg
	next := l.newInjection(pt)
	if l.isClosed() || !l.inj.CompareAndSwap(i, next) {
		l.inj.CompareAndSwap(i, nil)
		return nil, ErrClosed
	}
	l.resumeInjecting()
	return next, nil
}

// Injecting reports whether an injection is active on the leg.
func (l *Leg) Injecting() bool { return l.inj.Load() != nil }

// Write sends one packet carrying payload, then advances the timestamp by
// samples (160 for 20 ms at 8 kHz). The first packet of an injection has
// the marker bit set.
func (i *Injection) Write(payload []byte, samples uint32) error {
	return i.write(i.pt, payload, samples, false)
}

// WriteEvent sends one packet with an explicit payload type and marker
// and advances the timestamp by samples; it serves RFC 4733 events, whose
// packets of one event share a timestamp (samples 0 until the last).
func (i *Injection) WriteEvent(pt uint8, payload []byte, marker bool, samples uint32) error {
	return i.write(pt&0x7f, payload, samples, marker)
}

// Skip advances the timestamp by samples without sending, for frames a
// late pacer drops; the sequence number is not advanced, so the far end
// does not count loss.
func (i *Injection) Skip(samples uint32) {
	l := i.leg
	l.injMu.Lock()
	l.ts += samples
	l.injMu.Unlock()
}

func (i *Injection) write(pt uint8, payload []byte, samples uint32, marker bool) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return ErrClosed
	}
	l := i.leg
	if len(payload)+HeaderLen > maxPacket {
		return fmt.Errorf("inject %d bytes: payload too large", len(payload))
	}
	now := time.Now()
	l.injMu.Lock()
	m := marker || i.first
	i.first = false
	i.buf = AppendHeader(i.buf[:0], m, pt, l.seq, l.ts, l.ssrc)
	h := Header{Marker: m, PayloadType: pt, Sequence: l.seq, Timestamp: l.ts, SSRC: l.ssrc, PayloadOffset: HeaderLen}
	l.seq++
	l.ts += samples
	l.tsWall = now
	l.started = true
	l.injMu.Unlock()
	i.buf = append(i.buf, payload...)
	if !l.send(i.buf, false) {
		return nil // no remote yet: counted as unsent
	}
	l.injected.Add(1)
	if taps := l.outTaps.Load(); taps != nil {
		p := &i.pkt
		*p = Packet{Leg: l, Dir: Out, Header: h, Raw: i.buf, At: now, Injected: true}
		for _, t := range *taps {
			t.TapRTP(p)
		}
	}
	return nil
}

// Close ends the injection; relaying toward the leg resumes. It is
// idempotent.
func (i *Injection) Close() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil
	}
	i.closed = true
	i.leg.inj.CompareAndSwap(i, nil)
	return nil
}

// Source yields encoded audio frames for an injection.
type Source interface {
	// NextFrame appends the next frame's payload to dst[:0] and returns it
	// with the number of samples it covers. It returns io.EOF when done.
	NextFrame(dst []byte) (payload []byte, samples uint32, err error)
}

// DefaultPtime is the packetisation interval of played audio.
const DefaultPtime = 20 * time.Millisecond

// maxCatchUp bounds how many frames a late pacer sends at once; frames
// beyond it are skipped (timestamp advanced, nothing sent).
const maxCatchUp = 3

// Play paces frames from src into inj every ptime (DefaultPtime when
// zero) on a ticker, until src returns io.EOF (nil is returned), ctx ends
// (ctx.Err()) or the injection fails. It does not close inj.
func Play(ctx context.Context, inj *Injection, src Source, ptime time.Duration) error {
	if ptime <= 0 {
		ptime = DefaultPtime
	}
	buf := make([]byte, 0, maxPacket)
	start := time.Now()
	var sent int64
	send := func() (bool, error) {
		p, n, err := src.NextFrame(buf)
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("play: %w", err)
		}
		buf = p[:0]
		if err := inj.Write(p, n); err != nil {
			return false, fmt.Errorf("play: %w", err)
		}
		sent++
		return true, nil
	}
	if ok, err := send(); !ok {
		return err
	}
	tick := time.NewTicker(ptime)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			due := int64(now.Sub(start)/ptime) + 1 - sent
			for k := int64(0); k < due; k++ {
				if k >= maxCatchUp {
					// Too far behind: drop the rest of the backlog.
					for ; k < due; k++ {
						p, n, err := src.NextFrame(buf)
						if err != nil {
							break
						}
						buf = p[:0]
						inj.Skip(n)
						sent++
					}
					break
				}
				ok, err := send()
				if !ok {
					return err
				}
			}
		}
	}
}

// Play injects src toward the leg with payload type pt until src ends or
// ctx is done, then ends the injection. A Player is paced by its frame
// length; any other Source every DefaultPtime.
func (l *Leg) Play(ctx context.Context, src Source, pt uint8) error {
	inj, err := l.Inject(pt)
	if err != nil {
		return err
	}
	defer inj.Close()
	ptime := DefaultPtime
	if p, ok := src.(*Player); ok {
		ptime = p.Ptime()
	}
	return Play(ctx, inj, src, ptime)
}
