package recording

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"

	"pbx/rtpcore"
)

// tapBuffer collects what one party sends, for the writer loop: the relay
// appends each packet under a short lock, without allocating once the
// buffers have grown to their working size and without waking anyone;
// the writer swaps the buffer for its spare every DrainEvery. Past max
// packets waiting, packets are dropped and counted rather than holding up
// the relay.
type tapBuffer struct {
	mu      sync.Mutex
	cur     batch
	max     int
	dropped atomic.Uint64
}

// batch is a run of packets, one record after another in data: a
// recordHeader (payload length, payload type, RTP timestamp and SSRC,
// arrival in Unix nanoseconds) and then the payload, so that the relay
// writes one run of memory a packet.
type batch struct {
	n    int // packets
	data []byte
}

// Layout of a record's header in a batch (little-endian).
const (
	recLen  = 0  // uint16 payload length
	recPT   = 2  // uint8 payload type
	recTS   = 3  // uint32 RTP timestamp
	recSSRC = 7  // uint32 SSRC
	recAt   = 11 // int64 arrival, Unix nanoseconds

	recordHeader = 19
)

// TapRTP keeps what the party sent (In), never what the PBX sends or plays
// to it.
func (b *tapBuffer) TapRTP(p *rtpcore.Packet) {
	if p.Dir != rtpcore.In || p.Injected {
		return
	}
	pl := p.Payload()
	at := p.At.UnixNano()
	b.mu.Lock()
	if b.cur.n >= b.max || len(pl) > 0xFFFF {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.cur.n++
	k := len(b.cur.data)
	d := slices.Grow(b.cur.data, recordHeader+len(pl))[:k+recordHeader+len(pl)]
	h := d[k : k+recordHeader]
	binary.LittleEndian.PutUint16(h[recLen:], uint16(len(pl)))
	h[recPT] = p.Header.PayloadType
	binary.LittleEndian.PutUint32(h[recTS:], p.Header.Timestamp)
	binary.LittleEndian.PutUint32(h[recSSRC:], p.Header.SSRC)
	binary.LittleEndian.PutUint64(h[recAt:], uint64(at))
	copy(d[k+recordHeader:], pl)
	b.cur.data = d
	b.mu.Unlock()
}

// swap returns the packets collected so far and collects into spare's
// storage from now on.
func (b *tapBuffer) swap(spare batch) batch {
	spare.n, spare.data = 0, spare.data[:0]
	b.mu.Lock()
	out := b.cur
	b.cur = spare
	b.mu.Unlock()
	return out
}

// nextRecord returns the first packet of d, a batch's data (its header,
// payload and arrival in Unix nanoseconds), and the rest of d; ok is
// false when d holds no more.
func nextRecord(d []byte) (h rtpcore.Header, payload []byte, at int64, rest []byte, ok bool) {
	if len(d) < recordHeader {
		return h, nil, 0, nil, false
	}
	n := recordHeader + int(binary.LittleEndian.Uint16(d[recLen:]))
	h = rtpcore.Header{PayloadType: d[recPT], Timestamp: binary.LittleEndian.Uint32(d[recTS:]), SSRC: binary.LittleEndian.Uint32(d[recSSRC:])}
	return h, d[recordHeader:n], int64(binary.LittleEndian.Uint64(d[recAt:])), d[n:], true
}
