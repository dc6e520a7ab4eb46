package rtpcore

import (
	"encoding/binary"
	"time"
)

// DefaultTelephoneEventPT is the payload type the PBX offers for
// telephone-event/8000.
const DefaultTelephoneEventPT uint8 = 101

// DTMFEvent is an RFC 4733 telephone-event payload.
type DTMFEvent struct {
	Event    uint8  // 0-9 digits, 10 '*', 11 '#', 12-15 'A'-'D'
	End      bool   // E bit: the last packets of the event
	Volume   uint8  // 0-63, in -dBm0
	Duration uint16 // in timestamp units since the event's timestamp
}

// ParseDTMF parses a 4-byte telephone-event payload. Extra bytes (RFC 4733
// allows several events in redundancy formats) are ignored.
func ParseDTMF(b []byte) (DTMFEvent, error) {
	if len(b) < 4 {
		return DTMFEvent{}, ErrBadDTMF
	}
	return DTMFEvent{
		Event:    b[0],
		End:      b[1]&0x80 != 0,
		Volume:   b[1] & 0x3f,
		Duration: binary.BigEndian.Uint16(b[2:]),
	}, nil
}

// Append appends the event's 4-byte payload to b.
func (e DTMFEvent) Append(b []byte) []byte {
	v := e.Volume & 0x3f
	if e.End {
		v |= 0x80
	}
	b = append(b, e.Event, v)
	return binary.BigEndian.AppendUint16(b, e.Duration)
}

const dtmfDigits = "0123456789*#ABCD"

// DigitOf returns the character of a DTMF event code.
func DigitOf(event uint8) (rune, bool) {
	if int(event) < len(dtmfDigits) {
		return rune(dtmfDigits[event]), true
	}
	return 0, false
}

// EventOf returns the event code of a DTMF character (0-9 * # A-D, a-d).
func EventOf(digit rune) (uint8, bool) {
	if digit >= 'a' && digit <= 'd' {
		digit -= 'a' - 'A'
	}
	for i := 0; i < len(dtmfDigits); i++ {
		if rune(dtmfDigits[i]) == digit {
			return uint8(i), true
		}
	}
	return 0, false
}

// DTMFDetector turns a stream of RTP packets into DTMF digits, one per
// event. An event is identified by its SSRC and RTP timestamp: the
// repeated packets of an event, including the (usually three) end
// packets, produce one digit. The digit is reported on the first packet
// of the event that arrives, so it survives the loss of the others.
// It is not safe for concurrent use; feed it from one goroutine (a Tap).
type DTMFDetector struct {
	pt       uint8
	have     bool
	lastSSRC uint32
	lastTS   uint32
	lastEnd  bool
}

// NewDTMFDetector returns a detector for telephone events carried with
// payload type pt (the negotiated telephone-event type).
func NewDTMFDetector(pt uint8) *DTMFDetector {
	return &DTMFDetector{pt: pt & 0x7f}
}

// SetPayloadType changes the telephone-event payload type (after a
// re-negotiation).
func (d *DTMFDetector) SetPayloadType(pt uint8) { d.pt = pt & 0x7f }

// Feed inspects one packet (its header and payload) and returns a digit
// when the packet starts a new event. Packets of other payload types and
// malformed events are ignored.
func (d *DTMFDetector) Feed(h *Header, payload []byte) (rune, bool) {
	if h.PayloadType != d.pt {
		return 0, false
	}
	ev, err := ParseDTMF(payload)
	if err != nil {
		return 0, false
	}
	digit, ok := DigitOf(ev.Event)
	if !ok {
		return 0, false
	}
	if d.have && h.SSRC == d.lastSSRC && h.Timestamp == d.lastTS {
		d.lastEnd = d.lastEnd || ev.End
		return 0, false
	}
	d.have = true
	d.lastSSRC = h.SSRC
	d.lastTS = h.Timestamp
	d.lastEnd = ev.End
	return digit, true
}

// FeedPacket parses a raw RTP packet and feeds it to the detector.
func (d *DTMFDetector) FeedPacket(pkt []byte) (rune, bool) {
	h, err := ParseHeader(pkt)
	if err != nil {
		return 0, false
	}
	return d.Feed(&h, h.Payload(pkt))
}

// DTMFPackets returns the RFC 4733 payloads of one digit lasting dur
// samples, sent every step samples: progress packets with growing
// duration, then three end packets. All share the event's timestamp; the
// first carries the marker bit. Volume is 10 (-10 dBm0).
func DTMFPackets(digit rune, dur, step uint16) ([][]byte, error) {
	ev, ok := EventOf(digit)
	if !ok {
		return nil, ErrBadDTMF
	}
	if step == 0 {
		step = 160
	}
	var out [][]byte
	for d := step; d < dur; d += step {
		out = append(out, DTMFEvent{Event: ev, Volume: 10, Duration: d}.Append(nil))
	}
	for range 3 {
		out = append(out, DTMFEvent{Event: ev, Volume: 10, Duration: dur, End: true}.Append(nil))
	}
	return out, nil
}

// DTMFTap is a Tap that runs a DTMFDetector over the packets a leg
// receives from its far end (direction In) and calls OnDigit for each
// digit. OnDigit runs on the relay goroutine: it must be quick (hand the
// digit to a buffered channel, for instance).
type DTMFTap struct {
	det     *DTMFDetector
	onDigit func(digit rune, at time.Time)
}

// NewDTMFTap returns a DTMFTap for telephone events with payload type pt.
func NewDTMFTap(pt uint8, onDigit func(digit rune, at time.Time)) *DTMFTap {
	return &DTMFTap{det: NewDTMFDetector(pt), onDigit: onDigit}
}

// TapRTP feeds received packets to the detector.
func (t *DTMFTap) TapRTP(p *Packet) {
	if p.Dir != In {
		return
	}
	if d, ok := t.det.Feed(&p.Header, p.Payload()); ok && t.onDigit != nil {
		t.onDigit(d, p.At)
	}
}
