package recording

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"pbx/rtpcore"
)

// The taps hand the writer every packet their party sent, in order
// across the taps of a slice, in the run of their recording's slice, with its payload, header fields, arrival and recording
// intact, whatever the payload's size; they ignore what the PBX sends or
// plays, drop (and count) past each tap's bound until the writer takes
// the log, and after a swap the log collects afresh into the spare's
// storage.
func TestTapLogKeepsPacketsInOrderAndBounded(t *testing.T) {
	var log tapLog
	a := &tapBuffer{log: &log, slot: 7<<1 | 1, serial: 42, slice: 5, max: 4}
	other := &tapBuffer{log: &log, slot: 3 << 1, serial: 9, slice: 0, max: 4}
	type sent struct {
		h                   rtpcore.Header
		payload             []byte
		at                  int64
		slot, serial, slice int
	}
	var want []sent
	tap := func(b *tapBuffer, dir rtpcore.Direction, injected bool, pt uint8, ts, ssrc uint32, payload []byte, at time.Time) {
		raw := rtpcore.AppendHeader(nil, false, pt, 7, ts, ssrc)
		raw = append(raw, payload...)
		h, err := rtpcore.ParseHeader(raw)
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for _, w := range want {
			if w.slot == int(b.slot) {
				kept++
			}
		}
		b.TapRTP(&rtpcore.Packet{Dir: dir, Header: h, Raw: raw, At: at, Injected: injected})
		if dir == rtpcore.In && !injected && kept < b.max {
			want = append(want, sent{h: rtpcore.Header{PayloadType: pt, Timestamp: ts, SSRC: ssrc}, payload: payload, at: at.UnixNano(),
				slot: int(b.slot), serial: int(b.serial), slice: int(b.slice)})
		}
	}
	at := time.Date(2026, 11, 23, 23, 30, 0, 123456789, time.UTC)
	tap(a, rtpcore.In, false, rtpcore.PayloadPCMA, 160, 0xdeadbeef, bytes.Repeat([]byte{0xd5}, 160), at)
	tap(a, rtpcore.Out, false, rtpcore.PayloadPCMA, 320, 1, bytes.Repeat([]byte{1}, 160), at)
	tap(other, rtpcore.In, false, rtpcore.PayloadPCMU, 1, 2, []byte{3, 4}, at)
	tap(a, rtpcore.In, true, rtpcore.PayloadPCMA, 320, 1, bytes.Repeat([]byte{2}, 160), at)
	tap(a, rtpcore.In, false, 101, 0xFFFFFFFF, 0xdeadbeef, []byte{1, 0x80, 0, 160}, at.Add(20*time.Millisecond))
	tap(a, rtpcore.In, false, rtpcore.PayloadPCMU, 480, 9, nil, at.Add(40*time.Millisecond))
	tap(a, rtpcore.In, false, rtpcore.PayloadPCMU, 640, 9, bytes.Repeat([]byte{0x7f}, 1200), at.Add(-time.Second))
	for range 3 {
		tap(a, rtpcore.In, false, rtpcore.PayloadPCMU, 800, 9, []byte{1, 2, 3}, at) // beyond the bound
	}
	tap(other, rtpcore.In, false, rtpcore.PayloadPCMU, 161, 2, []byte{5}, at) // its own bound is not reached
	if a.dropped.Load() != 3 || other.dropped.Load() != 0 {
		t.Errorf("dropped %d and %d, want 3 and 0", a.dropped.Load(), other.dropped.Load())
	}
	var spare [drainSlices]batch
	spare[5].data = make([]byte, 0, 256)
	log.swap(&spare)
	if spare[5].n != 4 || spare[0].n != 2 {
		t.Errorf("%d and %d packets in slices 5 and 0, want 4 and 2", spare[5].n, spare[0].n)
	}
	// The slices' runs one after the other: each slice's packets in order.
	var all []byte
	for sl := range spare {
		all = append(all, spare[sl].data...)
	}
	slices.SortStableFunc(want, func(x, y sent) int { return x.slice - y.slice })
	i := 0
	for d := record(all); ; i++ {
		n := d.next()
		if n == 0 {
			if len(d) != 0 {
				t.Errorf("%d bytes left over", len(d))
			}
			break
		}
		if i >= len(want) {
			t.Fatalf("packet %d beyond the %d sent", i, len(want))
		}
		w := want[i]
		if d.header() != w.h || !bytes.Equal(d.payload(), w.payload) || d.at() != w.at || int(d.slot()) != w.slot ||
			int(d.serial()) != w.serial || d.slice() != w.slice || n != recordHeader+len(w.payload) {
			t.Errorf("packet %d: %+v %d bytes at %d of %d/%d in slice %d, want %+v %d bytes at %d of %d/%d in slice %d",
				i, d.header(), len(d.payload()), d.at(), d.slot(), d.serial(), d.slice(), w.h, len(w.payload), w.at, w.slot, w.serial, w.slice)
		}
		d = d[n:]
	}
	if i != len(want) {
		t.Errorf("%d packets, want %d", i, len(want))
	}
	// A swap starts each tap's count afresh, in the spare's storage.
	for range 4 {
		tap(a, rtpcore.In, false, rtpcore.PayloadPCMA, 960, 3, []byte{9}, at)
	}
	log.swap(&spare)
	if again := spare[5]; again.n != 4 || len(again.data) != 4*(recordHeader+1) || cap(again.data) != 256 || spare[0].n != 0 {
		t.Errorf("after a swap: %d packets, %d bytes in a buffer of %d (%d in slice 0), want 4, %d, the spare's 256 (0)",
			again.n, len(again.data), cap(again.data), spare[0].n, 4*(recordHeader+1))
	}
	if a.dropped.Load() != 3 {
		t.Errorf("dropped %d after a swap, want still 3", a.dropped.Load())
	}
}
