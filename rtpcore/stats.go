package rtpcore

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Sequence tracking limits from RFC 3550 appendix A.1.
const (
	maxDropout    = 3000
	maxMisorder   = 100
	seqMod        = 1 << 16
	jitterUnknown = -1
)

// recvStats tracks one leg's received stream: counts, loss from sequence
// gaps (RFC 3550 A.1/A.3) and interarrival jitter (A.8). A new SSRC or a
// large sequence jump starts a new stream; the loss of the streams before
// it is kept.
type recvStats struct {
	packets uint64
	bytes   uint64

	haveSeq   bool
	ssrc      uint32
	baseSeq   uint32
	maxSeq    uint16
	cycles    uint32
	received  uint64 // packets of the current stream
	priorLost int64  // loss of earlier streams

	haveTransit bool
	transit     int64   // arrival - timestamp, in clock units
	jitter      float64 // in clock units
}

func (r *recvStats) update(h *Header, size int, monoNanos int64, rate uint32) {
	r.packets++
	r.bytes += uint64(size)

	if !r.haveSeq || h.SSRC != r.ssrc {
		r.restart(h)
	} else {
		delta := h.Sequence - r.maxSeq
		switch {
		case delta == 0:
			// duplicate
		case delta < maxDropout:
			if h.Sequence < r.maxSeq {
				r.cycles += seqMod
			}
			r.maxSeq = h.Sequence
		case delta <= seqMod-maxMisorder:
			// A jump too large to be loss: the sender restarted its
			// sequence. Count it as a new stream.
			r.restart(h)
			r.received-- // restart counted this packet; counted again below
		default:
			// late or duplicate packet within the misorder window
		}
		r.received++
	}

	// Telephone events repeat their timestamp; dynamic payload types are
	// left out of the jitter estimate.
	if h.PayloadType >= 96 || rate == 0 {
		return
	}
	arrival := monoNanos * int64(rate) / int64(time.Second)
	transit := arrival - int64(h.Timestamp)
	if r.haveTransit {
		d := transit - r.transit
		// Timestamps wrap at 2^32.
		d = int64(int32(d))
		if d < 0 {
			d = -d
		}
		r.jitter += (float64(d) - r.jitter) / 16
	}
	r.transit = transit
	r.haveTransit = true
}

func (r *recvStats) restart(h *Header) {
	if r.haveSeq {
		r.priorLost = r.lost()
	}
	r.haveSeq = true
	r.ssrc = h.SSRC
	r.baseSeq = uint32(h.Sequence)
	r.maxSeq = h.Sequence
	r.cycles = 0
	r.received = 1
	r.haveTransit = false
}

// lost is the cumulative number of packets lost (never negative per
// stream: duplicates do not hide loss of other streams).
func (r *recvStats) lost() int64 {
	if !r.haveSeq {
		return r.priorLost
	}
	extMax := uint64(r.cycles) + uint64(r.maxSeq)
	expected := int64(extMax - uint64(r.baseSeq) + 1)
	l := expected - int64(r.received)
	if l < 0 {
		l = 0
	}
	return r.priorLost + l
}

func (r *recvStats) jitterDuration(rate uint32) time.Duration {
	if rate == 0 {
		return 0
	}
	return time.Duration(r.jitter / float64(rate) * float64(time.Second))
}

func randUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}
