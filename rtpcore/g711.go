package rtpcore

import "slices"

// Static payload types of the G.711 codecs (RFC 3551).
const (
	PayloadPCMU uint8 = 0 // µ-law
	PayloadPCMA uint8 = 8 // A-law
)

// G.711 lookup tables, built once from the ITU-T G.711 reference
// algorithm: 256-entry decode tables and 65536-entry encode tables
// indexed by the 16-bit sample as uint16.
var (
	alawToLinear [256]int16
	ulawToLinear [256]int16
	linearToAlaw [65536]byte
	linearToUlaw [65536]byte
)

func init() {
	for i := 0; i < 256; i++ {
		alawToLinear[i] = alawDecodeRef(byte(i))
		ulawToLinear[i] = ulawDecodeRef(byte(i))
	}
	for i := 0; i < 65536; i++ {
		s := int16(uint16(i))
		linearToAlaw[i] = alawEncodeRef(s)
		linearToUlaw[i] = ulawEncodeRef(s)
	}
}

var (
	segAEnd = [8]int{0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF}
	segUEnd = [8]int{0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF}
)

func segment(v int, table *[8]int) int {
	for i, end := range table {
		if v <= end {
			return i
		}
	}
	return 8
}

func alawEncodeRef(pcm int16) byte {
	v := int(pcm) >> 3
	mask := 0xD5
	if v < 0 {
		mask = 0x55
		v = -v - 1
	}
	seg := segment(v, &segAEnd)
	if seg >= 8 {
		return byte(0x7F ^ mask)
	}
	a := seg << 4
	if seg < 2 {
		a |= (v >> 1) & 0x0F
	} else {
		a |= (v >> seg) & 0x0F
	}
	return byte(a ^ mask)
}

func alawDecodeRef(a byte) int16 {
	a ^= 0x55
	t := int(a&0x0F) << 4
	seg := int(a&0x70) >> 4
	switch seg {
	case 0:
		t += 8
	case 1:
		t += 0x108
	default:
		t += 0x108
		t <<= seg - 1
	}
	if a&0x80 != 0 {
		return int16(t)
	}
	return int16(-t)
}

const (
	ulawBias = 0x84
	ulawClip = 8159
)

func ulawEncodeRef(pcm int16) byte {
	v := int(pcm) >> 2
	mask := 0xFF
	if v < 0 {
		v = -v
		mask = 0x7F
	}
	if v > ulawClip {
		v = ulawClip
	}
	v += ulawBias >> 2
	seg := segment(v, &segUEnd)
	if seg >= 8 {
		return byte(0x7F ^ mask)
	}
	u := seg<<4 | (v>>(seg+1))&0x0F
	return byte(u ^ mask)
}

func ulawDecodeRef(u byte) int16 {
	u = ^u
	t := (int(u&0x0F) << 3) + ulawBias
	t <<= (u & 0x70) >> 4
	if u&0x80 != 0 {
		return int16(ulawBias - t)
	}
	return int16(t - ulawBias)
}

// AlawEncode encodes one 16-bit linear sample as A-law.
func AlawEncode(s int16) byte { return linearToAlaw[uint16(s)] }

// AlawDecode decodes one A-law byte to a 16-bit linear sample.
func AlawDecode(b byte) int16 { return alawToLinear[b] }

// UlawEncode encodes one 16-bit linear sample as µ-law.
func UlawEncode(s int16) byte { return linearToUlaw[uint16(s)] }

// UlawDecode decodes one µ-law byte to a 16-bit linear sample.
func UlawDecode(b byte) int16 { return ulawToLinear[b] }

// EncodeAlaw appends the A-law encoding of pcm to dst.
func EncodeAlaw(dst []byte, pcm []int16) []byte {
	for _, s := range pcm {
		dst = append(dst, linearToAlaw[uint16(s)])
	}
	return dst
}

// EncodeUlaw appends the µ-law encoding of pcm to dst.
func EncodeUlaw(dst []byte, pcm []int16) []byte {
	for _, s := range pcm {
		dst = append(dst, linearToUlaw[uint16(s)])
	}
	return dst
}

// DecodeAlaw appends the linear samples of the A-law bytes src to dst.
func DecodeAlaw(dst []int16, src []byte) []int16 {
	n := len(dst)
	dst = slices.Grow(dst, len(src))[:n+len(src)]
	out := dst[n:]
	for i, b := range src {
		out[i] = alawToLinear[b]
	}
	return dst
}

// DecodeUlaw appends the linear samples of the µ-law bytes src to dst.
func DecodeUlaw(dst []int16, src []byte) []int16 {
	n := len(dst)
	dst = slices.Grow(dst, len(src))[:n+len(src)]
	out := dst[n:]
	for i, b := range src {
		out[i] = ulawToLinear[b]
	}
	return dst
}

// Encode appends the encoding of pcm in the codec of payload type pt
// (PayloadPCMA or PayloadPCMU) to dst; ok is false for another type.
func Encode(pt uint8, dst []byte, pcm []int16) (out []byte, ok bool) {
	switch pt {
	case PayloadPCMA:
		return EncodeAlaw(dst, pcm), true
	case PayloadPCMU:
		return EncodeUlaw(dst, pcm), true
	}
	return dst, false
}

// Decode appends the linear samples of payload in the codec of payload
// type pt to dst; ok is false for another type.
func Decode(pt uint8, dst []int16, payload []byte) (out []int16, ok bool) {
	switch pt {
	case PayloadPCMA:
		return DecodeAlaw(dst, payload), true
	case PayloadPCMU:
		return DecodeUlaw(dst, payload), true
	}
	return dst, false
}

// Silence returns the G.711 byte for a zero sample in the codec of pt.
func Silence(pt uint8) byte {
	if pt == PayloadPCMU {
		return 0xFF
	}
	return 0xD5
}
