package recording

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pbx/rtpcore"
)

// frames collects what the mixer writes.
type frames struct{ l, r []int16 }

func (f *frames) Size() int64 { return int64(4 * len(f.l)) }

func (f *frames) WritePCM(p []byte) error {
	if len(p)%4 != 0 {
		return fmt.Errorf("%d bytes: not whole frames", len(p))
	}
	for ; len(p) > 0; p = p[4:] {
		f.l = append(f.l, int16(binary.LittleEndian.Uint16(p)))
		f.r = append(f.r, int16(binary.LittleEndian.Uint16(p[2:])))
	}
	return nil
}

var t0 = time.Date(2026, 11, 21, 15, 12, 30, 0, time.UTC)

// pcma is 160 A-law bytes (20 ms) encoding the constant sample v.
func pcma(v int16) []byte {
	pcm := make([]int16, 160)
	for i := range pcm {
		pcm[i] = v
	}
	return rtpcore.EncodeAlaw(nil, pcm)
}

// send feeds packet n (20 ms each, timestamp 160n) of side, arriving at
// t0 + n*20ms + late.
func send(t *testing.T, m *mixer, side int, ssrc uint32, n int, v int16, late time.Duration) {
	t.Helper()
	h := rtpcore.Header{PayloadType: rtpcore.PayloadPCMA, Sequence: uint16(n), Timestamp: uint32(1000 + 160*n), SSRC: ssrc}
	if err := m.packet(side, h, pcma(v), t0.Add(time.Duration(n)*20*time.Millisecond+late)); err != nil {
		t.Fatal(err)
	}
}

func level(v int16) int16 { return rtpcore.AlawDecode(rtpcore.AlawEncode(v)) }

// checkRange asserts samples [from, to) of s all equal want.
func checkRange(t *testing.T, name string, s []int16, from, to int, want int16) {
	t.Helper()
	if to > len(s) {
		t.Fatalf("%s: %d samples, want at least %d", name, len(s), to)
	}
	for i := from; i < to; i++ {
		if s[i] != want {
			t.Fatalf("%s: sample %d (%.3f s) is %d, want %d", name, i, float64(i)/8000, s[i], want)
		}
	}
}

func TestMixerKeepsChannelsApartAndAligned(t *testing.T) {
	f := &frames{}
	m := newMixer(f, 8000, t0)
	// The caller talks for 1 s; the far end answers at 0.5 s for 1 s.
	for n := 0; n < 75; n++ {
		if n < 50 {
			send(t, m, Left, 1, n, 1000, 0)
		}
		if n >= 25 {
			send(t, m, Right, 2, n, -2000, 0)
		}
	}
	if err := m.finish(t0.Add(1600 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if len(f.l) != len(f.r) || len(f.l) != 12800 {
		t.Fatalf("frames %d/%d, want 12800 (1.6 s)", len(f.l), len(f.r))
	}
	checkRange(t, "left while caller talks", f.l, 0, 8000, level(1000))
	checkRange(t, "left after", f.l, 8000, 12800, 0)
	checkRange(t, "right before the far end talks", f.r, 0, 4000, 0)
	checkRange(t, "right", f.r, 4000, 12000, level(-2000))
	checkRange(t, "right after", f.r, 12000, 12800, 0)
}

func TestMixerLossReorderAndGapBecomeSilenceInPlace(t *testing.T) {
	f := &frames{}
	m := newMixer(f, 8000, t0)
	for n := 0; n < 100; n++ {
		send(t, m, Right, 2, n, 500, 0)
		switch {
		case n == 10: // lost
		case n == 20: // arrives after 21, 40 ms late
		case n == 21:
			send(t, m, Left, 1, 21, 1000, 0)
			send(t, m, Left, 1, 20, 1000, 40*time.Millisecond)
		case n >= 40 && n < 60: // 400 ms gap (silence suppression)
		default:
			send(t, m, Left, 1, n, 1000, 0)
		}
	}
	if err := m.finish(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, "right", f.r, 0, 16000, level(500))
	checkRange(t, "left before the loss", f.l, 0, 1600, level(1000))
	checkRange(t, "lost packet", f.l, 1600, 1760, 0)
	checkRange(t, "reordered packets in place", f.l, 1760, 6400, level(1000))
	checkRange(t, "gap", f.l, 6400, 9600, 0)
	checkRange(t, "after the gap, aligned", f.l, 9600, 16000, level(1000))
}

func TestMixerPadsTheLaggingSideBeyondTwoSeconds(t *testing.T) {
	f := &frames{}
	m := newMixer(f, 8000, t0)
	// The far end is silent (sends nothing) for the first 3 s while the
	// caller talks: once the caller is more than 2 s ahead, its audio is
	// written against silence instead of waiting.
	for n := 0; n < 150; n++ {
		send(t, m, Left, 1, n, 1000, 0)
		if n == 110 { // 2.2 s in; the writer's drain hands out what is final
			if err := m.emit(); err != nil {
				t.Fatal(err)
			}
			if len(f.l) == 0 {
				t.Fatal("nothing written with the caller 2.2 s ahead")
			}
			if lag := 110*160 + 160 - len(f.l); lag > 16000+1600 { // MaxDrift and the reorder window
				t.Fatalf("caller held back %d frames, more than 2.2 s", lag)
			}
		}
	}
	for n := 150; n < 200; n++ {
		send(t, m, Left, 1, n, 1000, 0)
		send(t, m, Right, 2, n, -700, 0)
	}
	if err := m.finish(t0.Add(4 * time.Second)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, "caller", f.l, 0, 32000, level(1000))
	checkRange(t, "far end silent", f.r, 0, 24000, 0)
	checkRange(t, "far end, in place", f.r, 24000, 32000, level(-700))
}

func TestMixerReanchorsARestartedStream(t *testing.T) {
	f := &frames{}
	m := newMixer(f, 8000, t0)
	for n := 0; n < 25; n++ {
		send(t, m, Left, 1, n, 1000, 0)
		send(t, m, Right, 2, n, 1000, 0)
	}
	// After hold the caller's phone resumes at 1.5 s with its timestamps
	// going on from where they stopped (0.5 s): placed by arrival.
	for n := 25; n < 75; n++ {
		send(t, m, Right, 2, n, 1000, 0)
	}
	for n := 0; n < 25; n++ {
		h := rtpcore.Header{PayloadType: rtpcore.PayloadPCMA, Timestamp: uint32(1000 + 160*(25+n)), SSRC: 1}
		if err := m.packet(Left, h, pcma(3000), t0.Add(1500*time.Millisecond+time.Duration(n)*20*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		send(t, m, Right, 2, 75+n, 1000, 0)
	}
	if err := m.finish(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, "before hold", f.l, 0, 4000, level(1000))
	checkRange(t, "hold", f.l, 4000, 12000, 0)
	checkRange(t, "after hold", f.l, 12000, 16000, level(3000))
	checkRange(t, "far end throughout", f.r, 0, 16000, level(1000))
}

// mixPacket is one packet for a mixer: which side, header, payload and
// arrival.
type mixPacket struct {
	side    int
	h       rtpcore.Header
	payload []byte
	at      time.Time
}

// messyCall is a minute of both directions as the writer's drains see
// them (every 200 ms, the caller's packets then the far end's): jittered,
// lost, reordered (some beyond the reorder window), a new SSRC with a
// jumped clock mid-call, telephone-event packets, 3 s of one-way silence,
// μ-law on one side and A-law on the other.
func messyCall(seed uint64) [][]mixPacket {
	rnd := rand.New(rand.NewPCG(seed, 1))
	var all []mixPacket
	for side := range 2 {
		ssrc, ts := uint32(10+side), uint32(5000*side)
		pt := []uint8{rtpcore.PayloadPCMA, rtpcore.PayloadPCMU}[side]
		for n := range 3000 {
			if side == Right && n >= 1000 && n < 1150 || rnd.IntN(100) < 3 {
				continue // one-way silence, loss
			}
			if side == Left && n == 1500 {
				ssrc, ts = 99, ts+123456
			}
			h := rtpcore.Header{PayloadType: pt, Sequence: uint16(n), Timestamp: ts + uint32(160*n), SSRC: ssrc}
			if rnd.IntN(200) == 0 {
				h.PayloadType = 101
			}
			late := time.Duration(rnd.IntN(60)) * time.Millisecond
			if rnd.IntN(100) == 0 {
				late += 300 * time.Millisecond
			}
			payload := make([]byte, 160)
			for i := range payload {
				payload[i] = byte(rnd.Uint32())
			}
			all = append(all, mixPacket{side, h, payload, t0.Add(time.Duration(n)*20*time.Millisecond + late)})
		}
	}
	slices.SortStableFunc(all, func(a, b mixPacket) int { return a.at.Compare(b.at) })
	var drains [][]mixPacket
	for len(all) > 0 {
		end := all[0].at.Add(200 * time.Millisecond)
		i := 0
		for i < len(all) && all[i].at.Before(end) {
			i++
		}
		d := slices.Clone(all[:i])
		slices.SortStableFunc(d, func(a, b mixPacket) int { return a.side - b.side })
		drains = append(drains, d)
		all = all[i:]
	}
	return drains
}

// mixAll runs drains through a mixer, handing audio out every emitEvery
// packets (0: only at the end), and returns the WAV.
func mixAll(t *testing.T, drains [][]mixPacket, emitEvery int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.wav")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := rtpcore.NewWAVWriter(f, 8000, 2)
	if err != nil {
		t.Fatal(err)
	}
	m := newMixer(w, 8000, t0)
	k := 0
	for _, d := range drains {
		for _, p := range d {
			if err := m.packet(p.side, p.h, p.payload, p.at); err != nil {
				t.Fatal(err)
			}
			if k++; emitEvery > 0 && k%emitEvery == 0 {
				if err := m.emit(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := m.finish(t0.Add(61 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMixerOutputIndependentOfEmitCadence proves that when the writer
// hands audio out (every packet, every drain, only at the end) changes
// nothing in the file: which frames are final is decided packet by packet.
func TestMixerOutputIndependentOfEmitCadence(t *testing.T) {
	drains := messyCall(7)
	ref := mixAll(t, drains, 1)
	if len(ref) < 44+60*8000*4 {
		t.Fatalf("%d bytes for a minute of stereo", len(ref))
	}
	for _, every := range []int{0, 7, 10, 1000} {
		if got := mixAll(t, drains, every); !bytes.Equal(got, ref) {
			t.Errorf("emitting every %d packets: %d bytes differ from emitting every packet (%d bytes)", every, len(got), len(ref))
		}
	}
	// The file as the mixer wrote it when it kept decoded samples: keeping
	// G.711 bytes and decoding on the way out changes nothing.
	if sum := fmt.Sprintf("%x", sha256.Sum256(ref)); sum != "2364ff37c9c004bd988a57503ccf4709d88249556e085e542a5c1220f3deeb3a" {
		t.Errorf("sha256 %s", sum)
	}
}

// A side that changes codec mid-call (a re-INVITE) is decoded in each
// packet's own codec, and its gaps are silence (sample 0, which no A-law
// byte decodes to), whatever the codec around them; hand-outs of any size
// keep the alignment.
func TestMixerFollowsACodecChangeWithSilentGaps(t *testing.T) {
	f := &frames{}
	m := newMixer(f, 8000, t0)
	ulaw := rtpcore.EncodeUlaw(nil, make([]int16, 160))
	for i := range ulaw {
		ulaw[i] = rtpcore.UlawEncode(-3000)
	}
	for n := 0; n < 100; n++ {
		at := t0.Add(time.Duration(n) * 20 * time.Millisecond)
		switch {
		case n < 25:
			send(t, m, Left, 1, n, 1000, 0)
		case n >= 30:
			h := rtpcore.Header{PayloadType: rtpcore.PayloadPCMU, Timestamp: uint32(1000 + 160*n), SSRC: 1}
			if err := m.packet(Left, h, ulaw, at); err != nil {
				t.Fatal(err)
			}
		}
		h := rtpcore.Header{PayloadType: rtpcore.PayloadPCMU, Timestamp: uint32(9000 + 160*n), SSRC: 2}
		if n < 60 || n >= 70 {
			if n >= 80 {
				send(t, m, Right, 2, n, 700, 0) // a new codec and timestamp origin
			} else if err := m.packet(Right, h, ulaw, at); err != nil {
				t.Fatal(err)
			}
		}
		switch n {
		case 40:
			if err := m.emitN(13); err != nil { // not a whole byte of the bitmaps
				t.Fatal(err)
			}
		case 55, 90:
			if err := m.emit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.finish(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	u := rtpcore.UlawDecode(rtpcore.UlawEncode(-3000))
	checkRange(t, "left A-law", f.l, 0, 4000, level(1000))
	checkRange(t, "left gap", f.l, 4000, 4800, 0)
	checkRange(t, "left µ-law", f.l, 4800, 16000, u)
	checkRange(t, "right µ-law", f.r, 0, 9600, u)
	checkRange(t, "right gap", f.r, 9600, 11200, 0)
	checkRange(t, "right µ-law again", f.r, 11200, 12800, u)
	checkRange(t, "right A-law", f.r, 12800, 16000, level(700))
	if len(f.l) != 16000 || len(f.r) != 16000 {
		t.Errorf("%d and %d frames, want 16000", len(f.l), len(f.r))
	}
}

// pageSink is a WAV writer that notes where the file ends after each
// write.
type pageSink struct {
	*rtpcore.WAVWriter
	ends []int64
}

func (p *pageSink) WritePCM(b []byte) error {
	err := p.WAVWriter.WritePCM(b)
	p.ends = append(p.ends, p.Size())
	return err
}

// Once a page of audio is final, the writer's writes end the file on page
// boundaries (the kernel then never takes up a page twice), holding back
// less than a page; with less than a page final, what is final goes out.
func TestMixerWritesEndOnPageBoundaries(t *testing.T) {
	w, err := rtpcore.NewWAVWriter(discardSeeker{}, 8000, 2)
	if err != nil {
		t.Fatal(err)
	}
	sink := &pageSink{WAVWriter: w}
	m := newMixer(sink, 8000, t0)
	for n := 0; n < 500; n++ { // 10 s, handed out each 400 ms
		send(t, m, Left, 1, n, 1000, 0)
		send(t, m, Right, 2, n, -700, 0)
		if n%20 == 19 {
			final := m.written - m.base
			if err := m.emit(); err != nil {
				t.Fatal(err)
			}
			held := m.written - m.base
			switch {
			case final < pageSize/4 && held > 7:
				t.Fatalf("packet %d: %d frames final, less than a page, but %d held back", n, final, held)
			case final >= pageSize/4 && (sink.Size()%pageSize != 0 || held >= pageSize/4):
				t.Fatalf("packet %d: the file ends at %d with %d frames held back", n, sink.Size(), held)
			}
		}
	}
	if len(sink.ends) < 20 {
		t.Fatalf("%d writes in 10 s", len(sink.ends))
	}
	if err := m.finish(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := sink.Frames(); got != 80000 {
		t.Errorf("%d frames in the file, want 80000", got)
	}
}
