package recording

import (
	"time"

	"pbx/rtpcore"
)

// Channels of a recording.
const (
	Left  = 0 // the caller
	Right = 1 // the far end
)

// MaxDrift is how far apart the two directions may drift before the
// lagging side is written against silence (the specification's limit).
const MaxDrift = 2 * time.Second

// reanchorAfter is how far a packet's position by its RTP timestamp may
// stray from its arrival time before the arrival time is believed instead
// (a sender that restarted its clock, a new stream after hold).
const reanchorAfter = 500 * time.Millisecond

// reorderWindow is how long a frame waits, once both directions are past
// it, for a late or reordered packet before it is written (as silence if
// none came).
const reorderWindow = 200 * time.Millisecond

// frameSink takes stereo frames; *rtpcore.WAVWriter is one.
type frameSink interface {
	WriteStereo(left, right []int16) error
}

// channel is one direction's audio not yet written out: buf[i] is the
// sample at frame mixer.base+i.
type channel struct {
	started   bool
	ssrc      uint32
	anchorTS  uint32
	anchorPos int64
	buf       []int16
	decoded   []int16
}

// mixer places each direction's samples on one wall-clock timeline that
// starts when the call was bridged, and writes frames once both directions
// have them: losses, gaps and reordering within the window become silence
// or fill it, and a direction more than MaxDrift behind the other is padded
// with silence. Which frames are final is decided packet by packet, but
// they are handed to the sink only by emit (once per drain, in one write),
// so the output does not depend on how often emit is called. It is not
// safe for concurrent use.
type mixer struct {
	rate    int
	t0      time.Time
	written int64 // frames final: nothing more is placed before this one
	base    int64 // frames handed to out; ch[i].buf[0] is frame base
	ch      [2]channel
	out     frameSink
	maxLag  int
	window  int
	tol     int64
}

func newMixer(out frameSink, rate int, t0 time.Time) *mixer {
	return &mixer{rate: rate, t0: t0, out: out,
		maxLag: int(MaxDrift.Seconds() * float64(rate)),
		window: int(reorderWindow.Seconds() * float64(rate)),
		tol:    int64(reanchorAfter.Seconds() * float64(rate))}
}

// wallPos is the frame position of instant t.
func (m *mixer) wallPos(t time.Time) int64 {
	return int64(t.Sub(m.t0)) * int64(m.rate) / int64(time.Second)
}

// packet places one RTP packet received from side's party. Payloads other
// than G.711 (telephone-event, comfort noise) are not audio and are
// skipped.
func (m *mixer) packet(side int, h rtpcore.Header, payload []byte, at time.Time) error {
	c := &m.ch[side]
	var ok bool
	c.decoded, ok = rtpcore.Decode(h.PayloadType, c.decoded[:0], payload)
	if !ok || len(c.decoded) == 0 {
		return nil
	}
	wall := m.wallPos(at)
	pos := wall
	if c.started && c.ssrc == h.SSRC {
		pos = c.anchorPos + int64(int32(h.Timestamp-c.anchorTS))
		if d := pos - wall; d > m.tol || d < -m.tol {
			pos = wall
			c.anchorTS, c.anchorPos = h.Timestamp, wall
		}
	} else {
		c.started, c.ssrc, c.anchorTS, c.anchorPos = true, h.SSRC, h.Timestamp, wall
	}
	m.place(side, pos, c.decoded)
	return m.flush(false)
}

// place copies samples at frame position pos of side; what falls before
// the frames already final is dropped (it came too late).
func (m *mixer) place(side int, pos int64, samples []int16) {
	c := &m.ch[side]
	idx := pos - m.written
	if idx < 0 {
		if -idx >= int64(len(samples)) {
			return
		}
		samples = samples[-idx:]
		idx = 0
	}
	idx += m.written - m.base
	end := int(idx) + len(samples)
	if end > len(c.buf) {
		c.buf = append(c.buf, make([]int16, end-len(c.buf))...)
	}
	copy(c.buf[idx:], samples)
}

// pending is how many frames of side are past the final ones.
func (m *mixer) pending(side int) int { return len(m.ch[side].buf) - int(m.written-m.base) }

// padTo extends side's pending audio with silence to n frames past the
// final ones.
func (m *mixer) padTo(side, n int) {
	n += int(m.written - m.base)
	if c := &m.ch[side]; n > len(c.buf) {
		c.buf = append(c.buf, make([]int16, n-len(c.buf))...)
	}
}

// flush makes final the frames both directions are more than
// reorderWindow past. A direction more than MaxDrift behind the other is
// first padded with silence to MaxDrift behind; at the end (final) both are
// padded to the longer and everything is written out.
func (m *mixer) flush(final bool) error {
	l, r := m.pending(Left), m.pending(Right)
	switch {
	case final:
		m.padTo(Left, max(l, r))
		m.padTo(Right, max(l, r))
	case l-r > m.maxLag:
		m.padTo(Right, l-m.maxLag)
	case r-l > m.maxLag:
		m.padTo(Left, r-m.maxLag)
	}
	n := min(m.pending(Left), m.pending(Right))
	if !final {
		n -= m.window
	}
	if n > 0 {
		m.written += int64(n)
	}
	if final {
		return m.emit()
	}
	return nil
}

// emit hands the final frames to the sink in one write.
func (m *mixer) emit() error {
	n := int(m.written - m.base)
	if n <= 0 {
		return nil
	}
	err := m.out.WriteStereo(m.ch[Left].buf[:n], m.ch[Right].buf[:n])
	for i := range m.ch {
		c := &m.ch[i]
		c.buf = c.buf[:copy(c.buf, c.buf[n:])]
	}
	m.base = m.written
	return err
}

// finish writes everything pending out and pads both directions with
// silence to instant end, so the audio spans the bridged call.
func (m *mixer) finish(end time.Time) error {
	if w := m.wallPos(end) - m.written; w > 0 {
		m.padTo(Left, int(w))
		m.padTo(Right, int(w))
	}
	return m.flush(true)
}
