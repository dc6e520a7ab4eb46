package recording

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"

	"pbx/rtpcore"
)

// tapLog collects what every recording's parties send, for the writer
// loop, in one run of memory per slice of the writer's: the relay appends
// each packet after the last of its recording's slice under a short lock,
// without allocating once the buffers have grown to their working size
// and without waking anyone; the writer swaps the buffers for its spares
// every tick and appends each slice's run whole to the packets that slice
// waits to be served (one copy a slice, not a look at every packet). A
// run per slice, not one buffer a party, because the relay then writes
// memory it wrote a moment ago, a few cache lines after another, where a
// buffer of each party's would have it write hundreds of lines scattered
// over megabytes that the writer last read on another core: those misses,
// not the copying, were most of what the tap cost the relay
// (BenchmarkRecordedRelay).
type tapLog struct {
	mu  sync.Mutex
	cur [drainSlices]batch
	gen uint32 // swaps so far; a tap counts its packets afresh in each
}

// batch is a run of packets, one record after another in data: a
// recordHeader (payload length, payload type, RTP timestamp and SSRC,
// arrival in Unix nanoseconds, which recording and side) and then the
// payload, so that the relay writes one run of memory a packet.
type batch struct {
	n    int // packets
	data []byte
}

// Layout of a record's header in a batch (little-endian).
const (
	recLen    = 0  // uint16 payload length
	recPT     = 2  // uint8 payload type
	recTS     = 3  // uint32 RTP timestamp
	recSSRC   = 7  // uint32 SSRC
	recAt     = 11 // int64 arrival, Unix nanoseconds
	recSlot   = 19 // uint32 the recording's slot in the store's table, times 2, plus the side
	recSerial = 23 // uint32 the recording's serial number (a slot is reused)
	recSlice  = 27 // uint8 the writer loop's slice that serves the recording

	recordHeader = 28
)

// tapBuffer is one party's tap: it appends what the party sent (In),
// never what the PBX sends or plays to it, to the log, marked with its
// recording and side. Past max packets in the log since the writer last
// took it, packets are dropped and counted rather than holding up the
// relay or growing without bound.
type tapBuffer struct {
	log    *tapLog
	slot   uint32 // slot*2 + side
	serial uint32
	slice  uint8
	max    int

	gen     uint32 // the log's generation n counts in; guarded by log.mu
	n       int    // packets appended in generation gen; guarded by log.mu
	dropped atomic.Uint64
}

// TapRTP appends the packet to the log when the party sent it.
func (b *tapBuffer) TapRTP(p *rtpcore.Packet) {
	if p.Dir != rtpcore.In || p.Injected {
		return
	}
	pl := p.Payload()
	at := p.At.UnixNano()
	l := b.log
	l.mu.Lock()
	if b.gen != l.gen {
		b.gen, b.n = l.gen, 0
	}
	if b.n >= b.max || len(pl) > 0xFFFF {
		l.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.n++
	cur := &l.cur[b.slice%drainSlices]
	cur.n++
	k := len(cur.data)
	d := cur.data
	if need := k + recordHeader + len(pl); need <= cap(d) {
		d = d[:need]
	} else {
		d = slices.Grow(d, recordHeader+len(pl))[:need]
	}
	h := d[k : k+recordHeader]
	binary.LittleEndian.PutUint16(h[recLen:], uint16(len(pl)))
	h[recPT] = p.Header.PayloadType
	binary.LittleEndian.PutUint32(h[recTS:], p.Header.Timestamp)
	binary.LittleEndian.PutUint32(h[recSSRC:], p.Header.SSRC)
	binary.LittleEndian.PutUint64(h[recAt:], uint64(at))
	binary.LittleEndian.PutUint32(h[recSlot:], b.slot)
	binary.LittleEndian.PutUint32(h[recSerial:], b.serial)
	h[recSlice] = b.slice
	copy(d[k+recordHeader:], pl)
	cur.data = d
	l.mu.Unlock()
}

// swap leaves in spare the packets collected so far, slice by slice, and
// collects into spare's former storage from now on.
func (l *tapLog) swap(spare *[drainSlices]batch) {
	for i := range spare {
		spare[i].n, spare[i].data = 0, spare[i].data[:0]
	}
	l.mu.Lock()
	l.cur, *spare = *spare, l.cur
	l.gen++
	l.mu.Unlock()
}

// record is one packet's record at the start of a batch's data (and
// whatever follows it); its methods read the fields in place.
type record []byte

// next returns the record's length, header and payload, or 0 when r holds
// no whole record.
func (r record) next() int {
	if len(r) < recordHeader {
		return 0
	}
	n := recordHeader + int(binary.LittleEndian.Uint16(r[recLen:]))
	if n > len(r) {
		return 0
	}
	return n
}

// header is the packet's RTP header as the mixer needs it.
func (r record) header() rtpcore.Header {
	return rtpcore.Header{PayloadType: r[recPT], Timestamp: r.ts(), SSRC: r.ssrc()}
}

// ts is the packet's RTP timestamp.
func (r record) ts() uint32 { return binary.LittleEndian.Uint32(r[recTS:]) }

// ssrc is the packet's SSRC.
func (r record) ssrc() uint32 { return binary.LittleEndian.Uint32(r[recSSRC:]) }

// payload is the packet's payload.
func (r record) payload() []byte {
	return r[recordHeader : recordHeader+int(binary.LittleEndian.Uint16(r[recLen:]))]
}

// at is the packet's arrival, Unix nanoseconds.
func (r record) at() int64 { return int64(binary.LittleEndian.Uint64(r[recAt:])) }

// slot is the recording's slot times 2 plus the side.
func (r record) slot() uint32 { return binary.LittleEndian.Uint32(r[recSlot:]) }

// serial is the recording's serial number.
func (r record) serial() uint32 { return binary.LittleEndian.Uint32(r[recSerial:]) }

// slice is the writer loop's slice serving the recording.
func (r record) slice() int { return int(r[recSlice]) }
