package rtpcore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// WAVFormat describes a WAV file's PCM format.
type WAVFormat struct {
	AudioFormat   uint16 // 1 = PCM
	Channels      uint16
	SampleRate    uint32
	BitsPerSample uint16
}

// maxWAVBytes bounds the audio data ReadWAV accepts (about 70 minutes of
// 8 kHz mono), so a hostile header cannot make it allocate without limit.
const maxWAVBytes = 64 << 20

// ReadWAV reads a RIFF/WAVE stream of 8 kHz mono 16-bit PCM and returns
// its samples. Chunks other than fmt and data are skipped. Any other
// format is reported with ErrUnsupportedWAV naming what was found.
func ReadWAV(r io.Reader) ([]int16, error) {
	br := bufio.NewReader(r)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, fmt.Errorf("riff header: %w", ErrBadWAV)
	}
	if string(hdr[0:4]) != "RIFF" || string(hdr[8:12]) != "WAVE" {
		return nil, fmt.Errorf("not RIFF/WAVE: %w", ErrBadWAV)
	}
	var f WAVFormat
	haveFmt := false
	for {
		var ch [8]byte
		if _, err := io.ReadFull(br, ch[:]); err != nil {
			return nil, fmt.Errorf("no data chunk: %w", ErrBadWAV)
		}
		id := string(ch[0:4])
		size := binary.LittleEndian.Uint32(ch[4:])
		switch id {
		case "fmt ":
			if size < 16 || size > 1024 {
				return nil, fmt.Errorf("fmt chunk of %d bytes: %w", size, ErrBadWAV)
			}
			b := make([]byte, size+size%2)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil, fmt.Errorf("fmt chunk: %w", ErrBadWAV)
			}
			f = WAVFormat{
				AudioFormat:   binary.LittleEndian.Uint16(b[0:]),
				Channels:      binary.LittleEndian.Uint16(b[2:]),
				SampleRate:    binary.LittleEndian.Uint32(b[4:]),
				BitsPerSample: binary.LittleEndian.Uint16(b[14:]),
			}
			if f.AudioFormat == 0xFFFE && size >= 26 {
				// WAVE_FORMAT_EXTENSIBLE: the sub-format GUID starts with the
				// real format code.
				f.AudioFormat = binary.LittleEndian.Uint16(b[24:])
			}
			haveFmt = true
		case "data":
			if !haveFmt {
				return nil, fmt.Errorf("data before fmt: %w", ErrBadWAV)
			}
			if f.AudioFormat != 1 || f.Channels != 1 || f.SampleRate != 8000 || f.BitsPerSample != 16 {
				return nil, fmt.Errorf("format %d, %d channel(s), %d Hz, %d bits: %w",
					f.AudioFormat, f.Channels, f.SampleRate, f.BitsPerSample, ErrUnsupportedWAV)
			}
			return readSamples(br, size)
		default:
			skip := int64(size) + int64(size%2)
			if _, err := io.CopyN(io.Discard, br, skip); err != nil {
				return nil, fmt.Errorf("chunk %q: %w", id, ErrBadWAV)
			}
		}
	}
}

// readSamples reads the data chunk. A size of 0 or 0xFFFFFFFF (a writer
// that never finalised its header) and a size beyond the end of the file
// read to the end of the file.
func readSamples(r io.Reader, size uint32) ([]int16, error) {
	limit := int64(size)
	if size == 0 || size == 0xFFFFFFFF || limit > maxWAVBytes {
		limit = maxWAVBytes
	}
	var out []int16
	if size != 0xFFFFFFFF && int64(size) <= maxWAVBytes {
		out = make([]int16, 0, min(int(size/2), 1<<20))
	}
	buf := make([]byte, 32<<10)
	var read int64
	odd := false
	var carry byte
	for read < limit {
		want := min(int64(len(buf)), limit-read)
		n, err := r.Read(buf[:want])
		b := buf[:n]
		read += int64(n)
		if odd && len(b) > 0 {
			out = append(out, int16(binary.LittleEndian.Uint16([]byte{carry, b[0]})))
			b = b[1:]
			odd = false
		}
		for len(b) >= 2 {
			out = append(out, int16(binary.LittleEndian.Uint16(b)))
			b = b[2:]
		}
		if len(b) == 1 {
			carry, odd = b[0], true
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("wav data: %w", err)
		}
	}
	return out, nil
}

// LoadWAV reads the WAV file at path (8 kHz mono 16-bit PCM).
func LoadWAV(path string) ([]int16, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load wav: %w", err)
	}
	defer f.Close()
	pcm, err := ReadWAV(f)
	if err != nil {
		return nil, fmt.Errorf("load wav %s: %w", path, err)
	}
	return pcm, nil
}

// wavHeaderLen is the size of the canonical 44-byte PCM header.
const wavHeaderLen = 44

// WAVWriter writes 16-bit PCM WAV (two channels for call recordings). The
// header is written at once with sizes covering the data written so far
// and patched by Flush and Close, so the file is readable at any Flush.
// It is not safe for concurrent use.
type WAVWriter struct {
	w        io.WriteSeeker
	bw       *bufio.Writer
	file     *os.File // set by CreateWAV; closed by Close
	channels int
	rate     int
	data     int64 // bytes of audio written
	frame    []byte
	closed   bool
}

// CreateWAV creates (truncating) the file at path and returns a writer.
func CreateWAV(path string, sampleRate, channels int) (*WAVWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create wav: %w", err)
	}
	w, err := NewWAVWriter(f, sampleRate, channels)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.file = f
	return w, nil
}

// NewWAVWriter writes a WAV header to w and returns a writer for 16-bit
// PCM samples at sampleRate with the given channel count (1 or 2).
func NewWAVWriter(w io.WriteSeeker, sampleRate, channels int) (*WAVWriter, error) {
	if channels < 1 || channels > 2 {
		return nil, fmt.Errorf("wav writer: %d channels (want 1 or 2)", channels)
	}
	if sampleRate <= 0 {
		return nil, fmt.Errorf("wav writer: sample rate %d", sampleRate)
	}
	ww := &WAVWriter{w: w, bw: bufio.NewWriterSize(w, 32<<10), channels: channels, rate: sampleRate}
	if _, err := ww.bw.Write(ww.header()); err != nil {
		return nil, fmt.Errorf("wav header: %w", err)
	}
	return ww, nil
}

func (w *WAVWriter) header() []byte {
	h := make([]byte, 0, wavHeaderLen)
	data := uint32(min(w.data, 0xFFFFFFFF-36))
	blockAlign := w.channels * 2
	h = append(h, "RIFF"...)
	h = binary.LittleEndian.AppendUint32(h, 36+data)
	h = append(h, "WAVEfmt "...)
	h = binary.LittleEndian.AppendUint32(h, 16)
	h = binary.LittleEndian.AppendUint16(h, 1)
	h = binary.LittleEndian.AppendUint16(h, uint16(w.channels))
	h = binary.LittleEndian.AppendUint32(h, uint32(w.rate))
	h = binary.LittleEndian.AppendUint32(h, uint32(w.rate*blockAlign))
	h = binary.LittleEndian.AppendUint16(h, uint16(blockAlign))
	h = binary.LittleEndian.AppendUint16(h, 16)
	h = append(h, "data"...)
	h = binary.LittleEndian.AppendUint32(h, data)
	return h
}

// WriteStereo writes frames from left and right (caller and far end). The
// shorter slice is padded with silence. On a mono writer the channels are
// averaged.
func (w *WAVWriter) WriteStereo(left, right []int16) error {
	if w.closed {
		return ErrClosed
	}
	if w.channels == 2 && len(left) == len(right) {
		return w.writeStereoRun(left, right)
	}
	n := max(len(left), len(right))
	// Encode the whole run, then one write.
	w.frame = w.frame[:0]
	for i := 0; i < n; i++ {
		var l, r int16
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		if w.channels == 2 {
			w.frame = binary.LittleEndian.AppendUint16(w.frame, uint16(l))
			w.frame = binary.LittleEndian.AppendUint16(w.frame, uint16(r))
		} else {
			w.frame = binary.LittleEndian.AppendUint16(w.frame, uint16(int16((int32(l)+int32(r))/2)))
		}
	}
	if _, err := w.bw.Write(w.frame); err != nil {
		return fmt.Errorf("wav write: %w", err)
	}
	w.data += int64(len(w.frame))
	return nil
}

// writeStereoRun writes frames from left and right, of equal length,
// encoding them straight into the write buffer (one 32-bit store a frame),
// so that no copy of the run is made or kept.
func (w *WAVWriter) writeStereoRun(left, right []int16) error {
	right = right[:len(left)]
	for len(left) > 0 {
		buf := w.bw.AvailableBuffer()
		k := min(len(left), cap(buf)/4)
		if k == 0 {
			if err := w.bw.Flush(); err != nil {
				return fmt.Errorf("wav write: %w", err)
			}
			continue
		}
		buf = buf[:4*k]
		for i, l := range left[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:4*i+4], uint32(uint16(l))|uint32(uint16(right[i]))<<16)
		}
		if _, err := w.bw.Write(buf); err != nil {
			return fmt.Errorf("wav write: %w", err)
		}
		w.data += int64(len(buf))
		left, right = left[k:], right[k:]
	}
	return nil
}

// WritePCM writes frames already encoded as the file holds them:
// interleaved little-endian 16-bit samples, len(p) a multiple of the frame
// size. Audio still buffered goes first; p itself goes straight to the
// underlying writer in one write, without being copied, for a caller
// that encodes many writers' audio in one scratch of its own.
func (w *WAVWriter) WritePCM(p []byte) error {
	if w.closed {
		return ErrClosed
	}
	if len(p)%(2*w.channels) != 0 {
		return fmt.Errorf("wav write: %d bytes for %d channels", len(p), w.channels)
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("wav write: %w", err)
	}
	n, err := w.w.Write(p)
	w.data += int64(n)
	if err != nil {
		return fmt.Errorf("wav write: %w", err)
	}
	return nil
}

// WriteSamples writes interleaved samples (len a multiple of the channel
// count).
func (w *WAVWriter) WriteSamples(samples []int16) error {
	if w.closed {
		return ErrClosed
	}
	if len(samples)%w.channels != 0 {
		return fmt.Errorf("wav write: %d samples for %d channels", len(samples), w.channels)
	}
	for _, s := range samples {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], uint16(s))
		if _, err := w.bw.Write(b[:]); err != nil {
			return fmt.Errorf("wav write: %w", err)
		}
	}
	w.data += int64(2 * len(samples))
	return nil
}

// Frames is the number of sample frames written so far.
func (w *WAVWriter) Frames() int64 { return w.data / int64(2*w.channels) }

// Size is the file's size so far, header included, whether or not it has
// been flushed. It does not disturb writing.
func (w *WAVWriter) Size() int64 { return wavHeaderLen + w.data }

// Flush writes buffered audio and patches the header's sizes, so the file
// as it stands is a complete WAV; writing then continues at the end.
func (w *WAVWriter) Flush() error {
	if w.closed {
		return ErrClosed
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("wav flush: %w", err)
	}
	if _, err := w.w.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("wav flush: %w", err)
	}
	if _, err := w.w.Write(w.header()); err != nil {
		return fmt.Errorf("wav flush: %w", err)
	}
	if _, err := w.w.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("wav flush: %w", err)
	}
	return nil
}

// FlushData hands buffered audio to the file without patching the
// header: cheaper than Flush (one write), for a writer that flushes often
// so a crash loses little; the file's sizes are then those of the last
// Flush, and a reader of it as it stands must take the data to the end.
func (w *WAVWriter) FlushData() error {
	if w.closed {
		return ErrClosed
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("wav flush: %w", err)
	}
	return nil
}

// Close finalises the header and, for a writer from CreateWAV, closes
// the file. It is idempotent.
func (w *WAVWriter) Close() error {
	if w.closed {
		return nil
	}
	err := w.Flush()
	w.closed = true
	if w.file != nil {
		if cerr := w.file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("wav close: %w", cerr)
		}
	}
	return err
}
