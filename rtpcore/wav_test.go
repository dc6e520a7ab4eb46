package rtpcore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wavBytes builds a WAV file by hand with the given format fields and
// extra chunks before data.
func wavBytes(format, channels uint16, rate uint32, bits uint16, data []byte, extra ...[]byte) []byte {
	var b bytes.Buffer
	body := new(bytes.Buffer)
	body.WriteString("WAVE")
	body.WriteString("fmt ")
	binary.Write(body, binary.LittleEndian, uint32(16))
	binary.Write(body, binary.LittleEndian, format)
	binary.Write(body, binary.LittleEndian, channels)
	binary.Write(body, binary.LittleEndian, rate)
	binary.Write(body, binary.LittleEndian, rate*uint32(channels)*uint32(bits/8))
	binary.Write(body, binary.LittleEndian, channels*bits/8)
	binary.Write(body, binary.LittleEndian, bits)
	for _, e := range extra {
		body.Write(e)
	}
	body.WriteString("data")
	binary.Write(body, binary.LittleEndian, uint32(len(data)))
	body.Write(data)
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(body.Len()))
	b.Write(body.Bytes())
	return b.Bytes()
}

func TestReadWAV(t *testing.T) {
	samples := []byte{0x01, 0x00, 0xFF, 0xFF, 0x00, 0x80}        // 1, -1, -32768
	list := append([]byte("LIST"), 3, 0, 0, 0, 'a', 'b', 'c', 0) // odd size, padded
	tests := []struct {
		name string
		in   []byte
		want []int16
		err  error
		msg  string
	}{
		{name: "mono 8k", in: wavBytes(1, 1, 8000, 16, samples), want: []int16{1, -1, -32768}},
		{name: "skips odd chunk", in: wavBytes(1, 1, 8000, 16, samples, list), want: []int16{1, -1, -32768}},
		{name: "stereo", in: wavBytes(1, 2, 8000, 16, samples), err: ErrUnsupportedWAV, msg: "2 channel"},
		{name: "16 kHz", in: wavBytes(1, 1, 16000, 16, samples), err: ErrUnsupportedWAV, msg: "16000 Hz"},
		{name: "8 bit", in: wavBytes(1, 1, 8000, 8, samples), err: ErrUnsupportedWAV, msg: "8 bits"},
		{name: "a-law wav", in: wavBytes(6, 1, 8000, 8, samples), err: ErrUnsupportedWAV, msg: "format 6"},
		{name: "not riff", in: []byte("RIFX....WAVEfmt "), err: ErrBadWAV},
		{name: "truncated", in: wavBytes(1, 1, 8000, 16, samples)[:30], err: ErrBadWAV},
		{name: "empty", in: nil, err: ErrBadWAV},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadWAV(bytes.NewReader(tt.in))
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.err, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestReadWAVDataSizeBeyondFile(t *testing.T) {
	// A recorder killed before finalising leaves a size of 0; read what is there.
	b := wavBytes(1, 1, 8000, 16, []byte{5, 0, 6, 0})
	binary.LittleEndian.PutUint32(b[40:], 0)
	got, err := ReadWAV(bytes.NewReader(b))
	if err != nil || len(got) != 2 || got[1] != 6 {
		t.Fatalf("got %v %v", got, err)
	}
}

// parseWAVHeader reads the canonical 44-byte header fields a test needs.
func parseWAVHeader(t *testing.T, b []byte) (riff, channels, rate, bits, data uint32) {
	t.Helper()
	if len(b) < 44 || string(b[0:4]) != "RIFF" || string(b[8:16]) != "WAVEfmt " || string(b[36:40]) != "data" {
		t.Fatalf("bad header % x", b[:min(len(b), 44)])
	}
	return binary.LittleEndian.Uint32(b[4:]), uint32(binary.LittleEndian.Uint16(b[22:])),
		binary.LittleEndian.Uint32(b[24:]), uint32(binary.LittleEndian.Uint16(b[34:])), binary.LittleEndian.Uint32(b[40:])
}

func TestWAVWriterStereo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.wav")
	w, err := CreateWAV(path, 8000, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteStereo([]int16{1, 2, 3}, []int16{-1, -2}); err != nil {
		t.Fatal(err)
	}
	// Asked for its size midway: reports without disturbing the stream.
	if w.Size() != 44+3*4 || w.Frames() != 3 {
		t.Errorf("size %d frames %d", w.Size(), w.Frames())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	mid, _ := os.ReadFile(path)
	if int64(len(mid)) != w.Size() {
		t.Errorf("file %d bytes after flush, Size %d", len(mid), w.Size())
	}
	if riff, ch, rate, bits, data := parseWAVHeader(t, mid); riff != 36+12 || ch != 2 || rate != 8000 || bits != 16 || data != 12 {
		t.Errorf("midway header riff=%d ch=%d rate=%d bits=%d data=%d", riff, ch, rate, bits, data)
	}
	if err := w.WriteStereo([]int16{4}, []int16{-4}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if err := w.WriteStereo([]int16{1}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
	b, _ := os.ReadFile(path)
	if _, _, _, _, data := parseWAVHeader(t, b); data != 16 || len(b) != 44+16 {
		t.Fatalf("final data %d len %d", data, len(b))
	}
	var got []int16
	for i := 44; i < len(b); i += 2 {
		got = append(got, int16(binary.LittleEndian.Uint16(b[i:])))
	}
	want := []int16{1, -1, 2, -2, 3, 0, 4, -4} // left, right interleaved; short side silent
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("samples %v, want %v", got, want)
		}
	}
}

func TestWAVWriterMonoRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prompt.wav")
	w, err := CreateWAV(path, 8000, 1)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]int16, 1000)
	for i := range in {
		in[i] = int16(i*37 - 16000)
	}
	if err := w.WriteSamples(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := LoadWAV(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) || out[999] != in[999] || out[0] != in[0] {
		t.Fatalf("round trip len %d", len(out))
	}
	if _, err := NewWAVWriter(nil, 8000, 3); err == nil {
		t.Error("3 channels accepted")
	}
	if _, err := LoadWAV(filepath.Join(t.TempDir(), "missing.wav")); err == nil {
		t.Error("missing file loaded")
	}
}

func FuzzReadWAV(f *testing.F) {
	f.Add(wavBytes(1, 1, 8000, 16, []byte{1, 0, 2, 0}))
	f.Add(wavBytes(1, 2, 8000, 16, []byte{1, 0, 2, 0}, []byte("LIST\x01\x00\x00\x00x\x00")))
	f.Add([]byte("RIFF\x00\x00\x00\x00WAVEdata\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pcm, err := ReadWAV(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrBadWAV) && !errors.Is(err, ErrUnsupportedWAV) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(pcm) > len(b)/2 {
			t.Fatalf("%d samples from %d bytes", len(pcm), len(b))
		}
	})
}

func TestWAVFlushDataWritesAudioNotSizes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.wav")
	w, err := CreateWAV(path, 8000, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteStereo([]int16{1, 2, 3}, []int16{4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := w.FlushData(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) != 44+12 || binary.LittleEndian.Uint32(b[40:]) != 0 {
		t.Errorf("after FlushData: %d bytes, data size %d", len(b), binary.LittleEndian.Uint32(b[40:]))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if binary.LittleEndian.Uint32(b[40:]) != 12 {
		t.Errorf("after Close: data size %d", binary.LittleEndian.Uint32(b[40:]))
	}
}

// WritePCM's frames land after what WriteStereo buffered, reach the file
// at once (nothing of them is left buffered), count in the sizes, and a
// run of partial frames is refused.
func TestWAVWritePCMGoesStraightToTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.wav")
	w, err := CreateWAV(path, 8000, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteStereo([]int16{1}, []int16{-1}); err != nil {
		t.Fatal(err)
	}
	pcm := binary.LittleEndian.AppendUint16(nil, 2)
	pcm = binary.LittleEndian.AppendUint16(pcm, uint16(0xFFFE)) // -2
	pcm = binary.LittleEndian.AppendUint16(pcm, 3)
	pcm = binary.LittleEndian.AppendUint16(pcm, uint16(0xFFFD)) // -3
	if err := w.WritePCM(pcm); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); len(b) != 44+12 || w.Frames() != 3 {
		t.Errorf("after WritePCM: file %d bytes, %d frames", len(b), w.Frames())
	}
	if err := w.WritePCM(pcm[:6]); err == nil {
		t.Error("a frame and a half accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if _, _, _, _, data := parseWAVHeader(t, b); data != 12 {
		t.Errorf("data size %d, want 12", data)
	}
	var got []int16
	for i := 44; i+1 < len(b); i += 2 {
		got = append(got, int16(binary.LittleEndian.Uint16(b[i:])))
	}
	if want := []int16{1, -1, 2, -2, 3, -3}; !slices.Equal(got, want) {
		t.Errorf("samples %v, want %v", got, want)
	}
	if err := w.WritePCM(pcm); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
}
