package recording

import (
	"testing"
	"time"

	"pbx/rtpcore"
)

// frames collects what the mixer writes.
type frames struct{ l, r []int16 }

func (f *frames) WriteStereo(l, r []int16) error {
	f.l = append(f.l, l...)
	f.r = append(f.r, r...)
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
		if n == 110 { // 2.2 s in
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
