package recording

import (
	"sync"
	"sync/atomic"
	"time"

	"pbx/rtpcore"
)

// tapBuffer collects what one party sends, for the writer loop: the relay
// appends each packet's payload under a short lock, without allocating
// once the buffers have grown to their working size and without waking
// anyone; the writer swaps the buffer for its spare every DrainEvery.
// Past max packets waiting, packets are dropped and counted rather than
// holding up the relay.
type tapBuffer struct {
	mu      sync.Mutex
	cur     batch
	max     int
	dropped atomic.Uint64
}

// batch is a run of packets: their payloads one after another in data.
type batch struct {
	meta []pktMeta
	data []byte
}

type pktMeta struct {
	off, n int32
	at     int64 // arrival, Unix nanoseconds
	ts     uint32
	ssrc   uint32
	pt     uint8
}

// TapRTP keeps what the party sent (In), never what the PBX sends or plays
// to it.
func (b *tapBuffer) TapRTP(p *rtpcore.Packet) {
	if p.Dir != rtpcore.In || p.Injected {
		return
	}
	pl := p.Payload()
	b.mu.Lock()
	if len(b.cur.meta) >= b.max {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	off := len(b.cur.data)
	b.cur.data = append(b.cur.data, pl...)
	b.cur.meta = append(b.cur.meta, pktMeta{off: int32(off), n: int32(len(pl)), at: p.At.UnixNano(), ts: p.Header.Timestamp, ssrc: p.Header.SSRC, pt: p.Header.PayloadType})
	b.mu.Unlock()
}

// swap returns the packets collected so far and collects into spare's
// storage from now on.
func (b *tapBuffer) swap(spare batch) batch {
	spare.meta, spare.data = spare.meta[:0], spare.data[:0]
	b.mu.Lock()
	out := b.cur
	b.cur = spare
	b.mu.Unlock()
	return out
}

// each calls f for every packet of the batch, in arrival order.
func (bt *batch) each(f func(h rtpcore.Header, payload []byte, at time.Time)) {
	for _, m := range bt.meta {
		f(rtpcore.Header{PayloadType: m.pt, Timestamp: m.ts, SSRC: m.ssrc}, bt.data[m.off:m.off+m.n], time.Unix(0, m.at))
	}
}
