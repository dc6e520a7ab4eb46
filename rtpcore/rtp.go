package rtpcore

import (
	"encoding/binary"
	"fmt"
)

// HeaderLen is the length of an RTP header without CSRCs or extension.
const HeaderLen = 12

// Header is a parsed RTP fixed header. It holds no slices, so parsing one
// does not allocate.
type Header struct {
	Padding     bool
	Extension   bool
	Marker      bool
	CSRCCount   uint8
	PayloadType uint8
	Sequence    uint16
	Timestamp   uint32
	SSRC        uint32
	// PayloadOffset is where the payload starts in the packet (after the
	// CSRCs and the header extension).
	PayloadOffset int
	// PaddingLen is the number of padding bytes at the end of the packet.
	PaddingLen int
}

// ParseHeader parses the RTP header at the start of b. The payload is
// b[h.PayloadOffset : len(b)-h.PaddingLen].
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, ErrShortPacket
	}
	if b[0]>>6 != 2 {
		return h, ErrNotRTP
	}
	h.Padding = b[0]&0x20 != 0
	h.Extension = b[0]&0x10 != 0
	h.CSRCCount = b[0] & 0x0f
	h.Marker = b[1]&0x80 != 0
	h.PayloadType = b[1] & 0x7f
	h.Sequence = binary.BigEndian.Uint16(b[2:])
	h.Timestamp = binary.BigEndian.Uint32(b[4:])
	h.SSRC = binary.BigEndian.Uint32(b[8:])
	off := HeaderLen + 4*int(h.CSRCCount)
	if len(b) < off {
		return h, ErrShortPacket
	}
	if h.Extension {
		if len(b) < off+4 {
			return h, ErrShortPacket
		}
		off += 4 + 4*int(binary.BigEndian.Uint16(b[off+2:]))
		if len(b) < off {
			return h, ErrShortPacket
		}
	}
	h.PayloadOffset = off
	if h.Padding {
		p := int(b[len(b)-1])
		if p == 0 || off+p > len(b) {
			return h, fmt.Errorf("padding length %d: %w", p, ErrShortPacket)
		}
		h.PaddingLen = p
	}
	return h, nil
}

// Payload returns the payload of the packet b whose header is h.
func (h *Header) Payload(b []byte) []byte {
	return b[h.PayloadOffset : len(b)-h.PaddingLen]
}

// AppendHeader appends a 12-byte RTP header (no CSRCs, no extension, no
// padding) for the given fields to b.
func AppendHeader(b []byte, marker bool, pt uint8, seq uint16, ts, ssrc uint32) []byte {
	m := pt & 0x7f
	if marker {
		m |= 0x80
	}
	b = append(b, 0x80, m)
	b = binary.BigEndian.AppendUint16(b, seq)
	b = binary.BigEndian.AppendUint32(b, ts)
	b = binary.BigEndian.AppendUint32(b, ssrc)
	return b
}
