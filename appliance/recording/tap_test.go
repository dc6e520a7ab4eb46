package recording

import (
	"bytes"
	"testing"
	"time"

	"pbx/rtpcore"
)

// The tap hands the writer every packet the party sent, in order, with
// its payload, header fields and arrival intact, whatever the payload's
// size; it ignores what the PBX sends or plays, drops (and counts) past
// its bound, and after a swap collects afresh into the spare's storage.
func TestTapBufferKeepsPacketsInOrderAndBounded(t *testing.T) {
	b := &tapBuffer{max: 4}
	type sent struct {
		h       rtpcore.Header
		payload []byte
		at      time.Time
	}
	var want []sent
	tap := func(dir rtpcore.Direction, injected bool, pt uint8, ts, ssrc uint32, payload []byte, at time.Time) {
		raw := rtpcore.AppendHeader(nil, false, pt, 7, ts, ssrc)
		raw = append(raw, payload...)
		h, err := rtpcore.ParseHeader(raw)
		if err != nil {
			t.Fatal(err)
		}
		b.TapRTP(&rtpcore.Packet{Dir: dir, Header: h, Raw: raw, At: at, Injected: injected})
		if dir == rtpcore.In && !injected && len(want) < b.max {
			want = append(want, sent{rtpcore.Header{PayloadType: pt, Timestamp: ts, SSRC: ssrc}, payload, at})
		}
	}
	at := time.Date(2026, 11, 23, 23, 30, 0, 123456789, time.UTC)
	tap(rtpcore.In, false, rtpcore.PayloadPCMA, 160, 0xdeadbeef, bytes.Repeat([]byte{0xd5}, 160), at)
	tap(rtpcore.Out, false, rtpcore.PayloadPCMA, 320, 1, bytes.Repeat([]byte{1}, 160), at)
	tap(rtpcore.In, true, rtpcore.PayloadPCMA, 320, 1, bytes.Repeat([]byte{2}, 160), at)
	tap(rtpcore.In, false, 101, 0xFFFFFFFF, 0xdeadbeef, []byte{1, 0x80, 0, 160}, at.Add(20*time.Millisecond))
	tap(rtpcore.In, false, rtpcore.PayloadPCMU, 480, 9, nil, at.Add(40*time.Millisecond))
	tap(rtpcore.In, false, rtpcore.PayloadPCMU, 640, 9, bytes.Repeat([]byte{0x7f}, 1200), at.Add(-time.Second))
	for range 3 {
		tap(rtpcore.In, false, rtpcore.PayloadPCMU, 800, 9, []byte{1, 2, 3}, at) // beyond the bound
	}
	if b.dropped.Load() != 3 {
		t.Errorf("dropped %d, want 3", b.dropped.Load())
	}
	got := b.swap(batch{data: make([]byte, 0, 64)})
	if got.n != 4 {
		t.Errorf("%d packets, want 4", got.n)
	}
	i := 0
	for d := got.data; ; i++ {
		h, payload, ns, rest, ok := nextRecord(d)
		if !ok {
			break
		}
		if i >= len(want) {
			t.Fatalf("packet %d beyond the %d sent", i, len(want))
		}
		w := want[i]
		if h != w.h || !bytes.Equal(payload, w.payload) || ns != w.at.UnixNano() {
			t.Errorf("packet %d: %+v %d bytes at %d, want %+v %d bytes at %d", i, h, len(payload), ns, w.h, len(w.payload), w.at.UnixNano())
		}
		d = rest
	}
	if i != len(want) {
		t.Errorf("%d packets, want %d", i, len(want))
	}
	tap(rtpcore.In, false, rtpcore.PayloadPCMA, 960, 3, []byte{9}, at)
	if again := b.swap(batch{}); again.n != 1 || len(again.data) != recordHeader+1 || cap(again.data) != 64 {
		t.Errorf("after a swap: %d packets, %d bytes in a buffer of %d, want 1, %d, the spare's 64", again.n, len(again.data), cap(again.data), recordHeader+1)
	}
}
