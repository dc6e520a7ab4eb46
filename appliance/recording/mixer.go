package recording

import (
	"encoding/binary"
	"slices"
	"sync"
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

// frameSink takes stereo frames as a WAV holds them (interleaved,
// little-endian 16-bit samples, left first) and says how long its file is
// so far; *rtpcore.WAVWriter is one.
type frameSink interface {
	WritePCM(frames []byte) error
	Size() int64
}

// pageSize is the unit of the kernel's page cache. A write that ends
// inside a page costs the kernel that page twice (it zeroes the rest of
// it, and the next write takes it up again): ext4 took some 30% more CPU
// per byte for writes of 12.8 kB ending anywhere than for writes of whole
// pages.
const pageSize = 4096

// channel is one direction's audio not yet written out, kept as G.711
// bytes (half the memory of samples, which matters with hundreds of
// recordings each touching its window every drain) and decoded only when
// written: buf[i] is the byte of frame mixer.base+i, in the channel's
// main codec when bit i of other is clear and in the other G.711 codec
// when it is set; silence is µ-law 0xFF (sample 0). The main codec is
// that of the first packet placed while nothing is pending, so a channel
// in one codec throughout never sets a bit (only silence, when the main
// codec is A-law). Bits past len(buf) are always clear.
type channel struct {
	started   bool
	main      uint8 // the main codec: 0 µ-law, 1 A-law (an index of linear)
	ssrc      uint32
	anchorTS  uint32
	anchorPos int64
	buf       []byte
	other     []byte
}

// ulawSilence is the µ-law byte of sample 0.
const ulawSilence = 0xFF

// linear maps a channel byte to its sample: linear[0][b] for µ-law byte
// b, linear[1][b] for A-law byte b.
var linear = func() (t [2][256]int16) {
	var all [256]byte
	for i := range all {
		all[i] = byte(i)
	}
	copy(t[0][:], rtpcore.DecodeUlaw(nil, all[:]))
	copy(t[1][:], rtpcore.DecodeAlaw(nil, all[:]))
	return t
}()

// silence is a run of µ-law silence to pad channels with.
var silence = func() (s [1024]byte) {
	for i := range s {
		s[i] = ulawSilence
	}
	return s
}()

// grow extends the channel with silence to n frames.
func (c *channel) grow(n int) { c.extend(n, n) }

// extend makes the channel at least n frames long for a write of frames
// [from, n): the frames it adds before from are silence (marked when the
// main codec is A-law), those from on are left for the caller to write
// (they are not cleared, and their bits are clear: the main codec).
func (c *channel) extend(from, n int) {
	old := len(c.buf)
	if n <= old {
		return
	}
	if n <= cap(c.buf) {
		c.buf = c.buf[:n]
	} else {
		c.buf = slices.Grow(c.buf, n-old)[:n]
	}
	if nb := (n + 7) / 8; nb > len(c.other) {
		k := len(c.other)
		if nb <= cap(c.other) {
			c.other = c.other[:nb]
		} else {
			c.other = slices.Grow(c.other, nb-k)[:nb]
		}
		clear(c.other[k:])
	}
	if sil := max(old, min(from, n)); sil > old {
		for tail := c.buf[old:sil]; len(tail) > 0; {
			tail = tail[copy(tail, silence[:]):]
		}
		if c.main != 0 {
			c.mark(old, sil, true)
		}
	}
}

// interleave appends the first n frames of l and r to dst as the WAV
// holds them: each frame the left sample then the right, little-endian
// 16-bit. It is one pass, and in the usual case (each channel in one
// codec throughout) one table lookup a sample.
func interleave(dst []byte, l, r *channel, n int) []byte {
	k := len(dst)
	dst = slices.Grow(dst, 4*n)[:k+4*n]
	out, lb, rb := dst[k:], l.buf[:n], r.buf[:n]
	if tl, tr := l.uniform(n), r.uniform(n); tl != nil && tr != nil {
		// Eight frames a round, so the bounds are checked once for them.
		for len(lb) >= 8 && len(rb) >= 8 && len(out) >= 32 {
			o, a, b := out[:32], lb[:8], rb[:8]
			for j := range 8 {
				binary.LittleEndian.PutUint32(o[4*j:], uint32(uint16(tl[a[j]]))|uint32(uint16(tr[b[j]]))<<16)
			}
			out, lb, rb = out[32:], lb[8:], rb[8:]
		}
		for i, b := range lb {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(uint16(tl[b]))|uint32(uint16(tr[rb[i]]))<<16)
		}
		return dst
	}
	for i, b := range lb {
		ls := linear[l.other[i>>3]>>(i&7)&1^l.main][b]
		rs := linear[r.other[i>>3]>>(i&7)&1^r.main][rb[i]]
		binary.LittleEndian.PutUint32(out[4*i:], uint32(uint16(ls))|uint32(uint16(rs))<<16)
	}
	return dst
}

// uniform returns the table decoding all of the first n frames when they
// are in one codec, nil when they mix both.
func (c *channel) uniform(n int) *[256]int16 {
	bits := c.other[:(n+7)/8]
	first := bits[0]
	if first != 0 && first != 0xFF {
		return nil
	}
	for _, b := range bits[:n/8] {
		if b != first {
			return nil
		}
	}
	if n%8 != 0 && (bits[n/8]^first)&(1<<(n%8)-1) != 0 {
		return nil
	}
	return &linear[first&1^c.main]
}

// mark sets (other codec) or clears (main codec) the bits of frames
// [from, to).
func (c *channel) mark(from, to int, other bool) {
	var fill byte
	if other {
		fill = 0xFF
	}
	for ; from < to && from&7 != 0; from++ {
		c.setBit(from, other)
	}
	for ; from+8 <= to; from += 8 {
		c.other[from>>3] = fill
	}
	for ; from < to; from++ {
		c.setBit(from, other)
	}
}

func (c *channel) setBit(i int, other bool) {
	if other {
		c.other[i>>3] |= 1 << (i & 7)
	} else {
		c.other[i>>3] &^= 1 << (i & 7)
	}
}

// drop removes the first n frames.
func (c *channel) drop(n int) {
	rest := len(c.buf) - n
	c.buf = c.buf[:copy(c.buf, c.buf[n:])]
	if n%8 == 0 {
		c.other = c.other[:copy(c.other, c.other[n/8:])]
		return
	}
	for i := 0; i < rest; i++ { // n not a whole byte of bits: bit by bit
		j := i + n
		c.setBit(i, c.other[j>>3]>>(j&7)&1 != 0)
	}
	c.other = c.other[:(rest+7)/8]
	if rest%8 != 0 {
		c.other[rest>>3] &= 1<<(rest%8) - 1
	}
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
	t0ns    int64 // the start, Unix nanoseconds
	written int64 // frames final: nothing more is placed before this one
	base    int64 // frames handed to out; ch[i].buf[0] is frame base
	ch      [2]channel
	out     frameSink
	maxLag  int
	window  int
	tol     int64
}

func newMixer(out frameSink, rate int, t0 time.Time) *mixer {
	return &mixer{rate: rate, t0ns: t0.UnixNano(), out: out,
		maxLag: int(MaxDrift.Seconds() * float64(rate)),
		window: int(reorderWindow.Seconds() * float64(rate)),
		tol:    int64(reanchorAfter.Seconds() * float64(rate))}
}

// wallPos is the frame position of instant t.
func (m *mixer) wallPos(t time.Time) int64 { return m.wallPosNano(t.UnixNano()) }

// wallPosNano is the frame position of the instant at Unix nanoseconds
// ns.
func (m *mixer) wallPosNano(ns int64) int64 {
	return (ns - m.t0ns) * int64(m.rate) / int64(time.Second)
}

// packet places one RTP packet received from side's party at instant at.
func (m *mixer) packet(side int, h rtpcore.Header, payload []byte, at time.Time) error {
	return m.packetNano(side, h.PayloadType, h.Timestamp, h.SSRC, payload, at.UnixNano())
}

// packetNano places one RTP packet (payload type pt, RTP timestamp ts,
// SSRC ssrc) received from side's party at Unix nanoseconds at. Payloads
// other than G.711 (telephone-event, comfort noise) are not audio and are
// skipped.
func (m *mixer) packetNano(side int, pt uint8, ts, ssrc uint32, payload []byte, at int64) error {
	if (pt != rtpcore.PayloadPCMA && pt != rtpcore.PayloadPCMU) || len(payload) == 0 {
		return nil
	}
	c := &m.ch[side&1]
	wall := m.wallPosNano(at)
	pos := wall
	if c.started && c.ssrc == ssrc {
		pos = c.anchorPos + int64(int32(ts-c.anchorTS))
		if d := pos - wall; d > m.tol || d < -m.tol {
			pos = wall
			c.anchorTS, c.anchorPos = ts, wall
		}
	} else {
		c.started, c.ssrc, c.anchorTS, c.anchorPos = true, ssrc, ts, wall
	}
	m.place(c, pos, pt, payload)
	return m.flush(false)
}

// place copies the G.711 bytes of payload type pt into c's pending
// audio at frame position pos (one frame per byte); what falls before the
// frames already final is dropped (it came too late).
func (m *mixer) place(c *channel, pos int64, pt uint8, g711 []byte) {
	idx := pos - m.written
	if idx < 0 {
		if -idx >= int64(len(g711)) {
			return
		}
		g711 = g711[-idx:]
		idx = 0
	}
	idx += m.written - m.base
	end := int(idx) + len(g711)
	var codec uint8
	if pt == rtpcore.PayloadPCMA {
		codec = 1
	}
	old := len(c.buf)
	if old == 0 {
		c.main = codec // nothing pending: the bits may change meaning
	}
	c.extend(int(idx), end)
	copy(c.buf[idx:], g711)
	if other := codec != c.main; other || int(idx) < old {
		// Frames added by extend are already marked as the main codec.
		c.mark(int(idx), end, other)
	}
}

// pending is how many frames of side are past the final ones.
func (m *mixer) pending(side int) int { return len(m.ch[side].buf) - int(m.written-m.base) }

// padTo extends side's pending audio with silence to n frames past the
// final ones.
func (m *mixer) padTo(side, n int) {
	m.ch[side].grow(n + int(m.written-m.base))
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
		return m.emitN(int(m.written - m.base))
	}
	return nil
}

// emit hands the final frames to the sink in one write (the file's bytes
// do not depend on how they are cut). With a page of them or more, the
// write ends the file on a page boundary (up to pageSize/4-1 frames, 128
// ms, wait for the next emit); with less, it is whole bytes of the
// channels' A-law bitmaps (up to 7 frames wait). Once a write has reached
// a boundary, the next ones are whole pages and whole bytes both.
func (m *mixer) emit() error {
	n := m.written - m.base
	if n < pageSize/4 {
		return m.emitN(int(n &^ 7))
	}
	return m.emitN(int(n - (m.out.Size()+4*n)%pageSize/4))
}

// scratch holds the encoded frames of one emit; the writer loop reuses
// one for every recording, so it stays in the cache, and the sink writes
// straight from it.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// emitN encodes the first n final frames and hands them to the sink in
// one write.
func (m *mixer) emitN(n int) error {
	if n <= 0 {
		return nil
	}
	sp := scratch.Get().(*[]byte)
	pcm := interleave((*sp)[:0], &m.ch[Left], &m.ch[Right], n)
	err := m.out.WritePCM(pcm)
	*sp = pcm
	scratch.Put(sp)
	for i := range m.ch {
		m.ch[i].drop(n)
	}
	m.base += int64(n)
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
