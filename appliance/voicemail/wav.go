package voicemail

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Audio is 8 kHz mono 16-bit linear PCM throughout.
const (
	sampleRate   = 8000
	wavHeaderLen = 44
	frameLen     = 160 // samples per 20 ms
)

// wavHeader is the canonical 44-byte header of 8 kHz mono 16-bit PCM with
// data bytes of audio.
func wavHeader(data int64) []byte {
	d := uint32(min(data, 0xFFFFFFFF-36))
	h := make([]byte, 0, wavHeaderLen)
	h = append(h, "RIFF"...)
	h = binary.LittleEndian.AppendUint32(h, 36+d)
	h = append(h, "WAVEfmt "...)
	h = binary.LittleEndian.AppendUint32(h, 16)
	h = binary.LittleEndian.AppendUint16(h, 1)
	h = binary.LittleEndian.AppendUint16(h, 1)
	h = binary.LittleEndian.AppendUint32(h, sampleRate)
	h = binary.LittleEndian.AppendUint32(h, sampleRate*2)
	h = binary.LittleEndian.AppendUint16(h, 2)
	h = binary.LittleEndian.AppendUint16(h, 16)
	h = append(h, "data"...)
	return binary.LittleEndian.AppendUint32(h, d)
}

// pcmBytes encodes samples little-endian.
func pcmBytes(pcm []int16) []byte {
	b := make([]byte, 2*len(pcm))
	for i, s := range pcm {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
	}
	return b
}

// finishWAV cuts f's audio to data bytes (rounded down to a whole sample),
// writes the final header and fsyncs it.
func finishWAV(f *os.File, data int64) error {
	data &^= 1
	if err := f.Truncate(wavHeaderLen + data); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	if _, err := f.WriteAt(wavHeader(data), 0); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// readPCM reads a WAV written by this package (or any 8 kHz mono 16-bit
// PCM WAV with a canonical header) and returns its samples.
func readPCM(r io.Reader) ([]int16, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(b) < wavHeaderLen || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return nil, fmt.Errorf("not a WAV file")
	}
	// Walk the chunks for "data"; a greeting may come from elsewhere.
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:]))
		off += 8
		if id == "data" {
			end := min(off+size, len(b))
			pcm := make([]int16, (end-off)/2)
			for i := range pcm {
				pcm[i] = int16(binary.LittleEndian.Uint16(b[off+2*i:]))
			}
			return pcm, nil
		}
		off += size + size&1
	}
	return nil, fmt.Errorf("WAV file without data")
}
