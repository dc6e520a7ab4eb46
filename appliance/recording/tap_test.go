package recording

import (
	"testing"
	"time"

	"pbx/rtpcore"
)

// The taps place what each party sends in its own channel of the mixer,
// and nothing the PBX sends or plays; past maxFrames held for a side they
// drop (and count) rather than grow; once the recording is finishing
// they leave the mixer alone.
func TestSideTapsPlaceEachPartyAndAreBounded(t *testing.T) {
	f := &frames{}
	r := &Recorder{maxFrames: 8000} // a second a side
	r.mix = newMixer(f, 8000, t0)
	taps := [2]*sideTap{{r: r, side: Left}, {r: r, side: Right}}
	tap := func(side int, dir rtpcore.Direction, injected bool, n int, v int16) {
		raw := rtpcore.AppendHeader(nil, false, rtpcore.PayloadPCMA, uint16(n), uint32(160*n), uint32(1+side))
		raw = append(raw, pcma(v)...)
		h, err := rtpcore.ParseHeader(raw)
		if err != nil {
			t.Fatal(err)
		}
		taps[side].TapRTP(&rtpcore.Packet{Dir: dir, Header: h, Raw: raw, At: t0.Add(time.Duration(n) * 20 * time.Millisecond), Injected: injected})
	}
	for n := range 25 { // half a second of both
		tap(Left, rtpcore.In, false, n, 1000)
		tap(Right, rtpcore.In, false, n, -2000)
		tap(Left, rtpcore.Out, false, n, 5)      // what the PBX relays to the caller
		tap(Right, rtpcore.In, true, n, 7)       // what it plays
		tap(Right, rtpcore.Out, true, n+1000, 9) // far in the future, if it were kept
	}
	for n := 25; n < 200; n++ { // the caller alone, well beyond the bound
		tap(Left, rtpcore.In, false, n, 1000)
	}
	if d := r.Dropped(); d == 0 || len(r.mix.ch[Left].buf) > r.maxFrames {
		t.Errorf("dropped %d, the caller's window %d frames (bound %d)", d, len(r.mix.ch[Left].buf), r.maxFrames)
	}
	dropped, held := r.Dropped(), len(r.mix.ch[Right].buf)
	r.mixDone = true
	tap(Right, rtpcore.In, false, 30, 3000)
	if r.Dropped() != dropped || len(r.mix.ch[Right].buf) != held {
		t.Errorf("after the end: dropped %d (was %d), the far end's window %d frames (was %d)", r.Dropped(), dropped, len(r.mix.ch[Right].buf), held)
	}
	if err := r.mix.finish(t0.Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, "caller", f.l, 0, 4000, level(1000))
	checkRange(t, "far end", f.r, 0, 4000, level(-2000))
}
