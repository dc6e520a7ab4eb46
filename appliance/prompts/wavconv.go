package prompts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Rate is the sample rate of every prompt.
const Rate = 8000

// ErrWAV marks audio the converter cannot read.
var ErrWAV = errors.New("unreadable WAV")

// DecodeWAV reads a RIFF/WAVE file of any rate and channel count, in
// 8/16/24/32-bit integer PCM or 32/64-bit float, and returns its samples
// mixed down to mono in [-1, 1] with the sample rate.
func DecodeWAV(b []byte) ([]float64, int, error) {
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return nil, 0, fmt.Errorf("not RIFF/WAVE: %w", ErrWAV)
	}
	var format, channels, bits int
	var rate int
	haveFmt := false
	for p := 12; p+8 <= len(b); {
		id := string(b[p : p+4])
		size := int(binary.LittleEndian.Uint32(b[p+4:]))
		body := b[p+8:]
		if id == "data" && (size > len(body) || size == 0) {
			size = len(body) // a streamed WAV whose header gives no length (0 or 0xFFFFFFFF)
		}
		if size > len(body) {
			return nil, 0, fmt.Errorf("chunk %q truncated: %w", id, ErrWAV)
		}
		body = body[:size]
		switch id {
		case "fmt ":
			if size < 16 {
				return nil, 0, fmt.Errorf("fmt chunk of %d bytes: %w", size, ErrWAV)
			}
			format = int(binary.LittleEndian.Uint16(body[0:]))
			channels = int(binary.LittleEndian.Uint16(body[2:]))
			rate = int(binary.LittleEndian.Uint32(body[4:]))
			bits = int(binary.LittleEndian.Uint16(body[14:]))
			if format == 0xFFFE && size >= 26 {
				format = int(binary.LittleEndian.Uint16(body[24:]))
			}
			haveFmt = true
		case "data":
			if !haveFmt {
				return nil, 0, fmt.Errorf("data before fmt: %w", ErrWAV)
			}
			x, err := decodePCM(body, format, channels, bits)
			return x, rate, err
		}
		p += 8 + size + size%2
	}
	return nil, 0, fmt.Errorf("no data chunk: %w", ErrWAV)
}

// decodePCM mixes interleaved frames down to mono floats.
func decodePCM(b []byte, format, channels, bits int) ([]float64, error) {
	var sample func([]byte) float64
	switch {
	case format == 1 && bits == 8:
		sample = func(p []byte) float64 { return (float64(p[0]) - 128) / 128 }
	case format == 1 && bits == 16:
		sample = func(p []byte) float64 { return float64(int16(binary.LittleEndian.Uint16(p))) / 32768 }
	case format == 1 && bits == 24:
		sample = func(p []byte) float64 {
			v := int32(uint32(p[0])<<8|uint32(p[1])<<16|uint32(p[2])<<24) >> 8
			return float64(v) / (1 << 23)
		}
	case format == 1 && bits == 32:
		sample = func(p []byte) float64 { return float64(int32(binary.LittleEndian.Uint32(p))) / (1 << 31) }
	case format == 3 && bits == 32:
		sample = func(p []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(p))) }
	case format == 3 && bits == 64:
		sample = func(p []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(p)) }
	default:
		return nil, fmt.Errorf("format %d with %d bits: %w", format, bits, ErrWAV)
	}
	if channels < 1 {
		return nil, fmt.Errorf("%d channels: %w", channels, ErrWAV)
	}
	width := bits / 8
	frame := width * channels
	out := make([]float64, len(b)/frame)
	for i := range out {
		var sum float64
		for c := range channels {
			sum += sample(b[i*frame+c*width:])
		}
		out[i] = sum / float64(channels)
	}
	return out, nil
}

// Resample converts x from rate in to rate out with a windowed-sinc
// low-pass (cut-off 0.45 of the lower rate, Blackman window, 16 zero
// crossings each side) evaluated at every output instant: band-limited
// decimation or interpolation at any ratio, never sample dropping.
func Resample(x []float64, in, out int) []float64 {
	if in == out || len(x) == 0 {
		return append([]float64(nil), x...)
	}
	const zeros = 16
	fc := 0.45 * float64(min(in, out)) / float64(in) // cycles per input sample
	half := zeros / (2 * fc)                         // kernel half-width in input samples
	n := int(int64(len(x)) * int64(out) / int64(in))
	y := make([]float64, n)
	step := float64(in) / float64(out)
	for i := range y {
		t := float64(i) * step
		lo := max(int(math.Ceil(t-half)), 0)
		hi := min(int(math.Floor(t+half)), len(x)-1)
		var acc float64
		for k := lo; k <= hi; k++ {
			d := t - float64(k)
			acc += x[k] * kernel(d, fc, half)
		}
		y[i] = acc
	}
	return y
}

// kernel is the windowed sinc of cut-off fc at distance d (input samples).
func kernel(d, fc, half float64) float64 {
	s := 2 * fc
	if d != 0 {
		a := 2 * math.Pi * fc * d
		s = 2 * fc * math.Sin(a) / a
	}
	w := 0.42 + 0.5*math.Cos(math.Pi*d/half) + 0.08*math.Cos(2*math.Pi*d/half)
	return s * w
}

// ToPCM16 converts floats in [-1, 1] to 16-bit samples, clipping.
func ToPCM16(x []float64) []int16 {
	out := make([]int16, len(x))
	for i, v := range x {
		v = math.Round(v * 32767)
		out[i] = int16(max(min(v, 32767), -32768))
	}
	return out
}

// EncodeWAV is the 8 kHz mono 16-bit WAV file of pcm.
func EncodeWAV(pcm []int16) []byte {
	data := 2 * len(pcm)
	b := make([]byte, 44+data)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+data))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], Rate)
	binary.LittleEndian.PutUint32(b[28:], Rate*2)
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(data))
	for i, s := range pcm {
		binary.LittleEndian.PutUint16(b[44+2*i:], uint16(s))
	}
	return b
}

// Condition turns synthesised speech at rate into a prompt: resampled to
// 8 kHz, leading and trailing silence trimmed (10 ms kept each side), pauses
// inside shortened to 100 ms and
// the peak normalised to -3 dBFS.
func Condition(x []float64, rate int) []int16 {
	y := Resample(x, rate, Rate)
	var peak float64
	for _, v := range y {
		peak = max(peak, math.Abs(v))
	}
	if peak == 0 {
		return nil
	}
	thr := peak * 0.02
	first, last := 0, len(y)-1
	for first < len(y) && math.Abs(y[first]) < thr {
		first++
	}
	for last > first && math.Abs(y[last]) < thr {
		last--
	}
	const margin = Rate / 100
	y = shortenPauses(y[max(first-margin, 0):min(last+margin+1, len(y))], thr, Rate/10)
	g := 0.708 / peak
	for i := range y {
		y[i] *= g
	}
	return ToPCM16(y)
}

// shortenPauses cuts every run of samples below thr longer than keep
// down to keep samples (the middle of the pause is removed).
func shortenPauses(y []float64, thr float64, keep int) []float64 {
	out := y[:0:0]
	run := 0
	for _, v := range y {
		if math.Abs(v) < thr {
			run++
			if run > keep {
				continue
			}
		} else {
			run = 0
		}
		out = append(out, v)
	}
	return out
}

// Tone is the record beep: 1 kHz for 300 ms at -6 dBFS with 5 ms ramps.
func Tone() []int16 {
	const n, ramp = Rate * 3 / 10, Rate / 200
	x := make([]float64, n)
	for i := range x {
		a := 0.5
		if i < ramp {
			a *= float64(i) / ramp
		} else if n-1-i < ramp {
			a *= float64(n-1-i) / ramp
		}
		x[i] = a * math.Sin(2*math.Pi*1000*float64(i)/Rate)
	}
	return ToPCM16(x)
}
