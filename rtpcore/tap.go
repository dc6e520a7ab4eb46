package rtpcore

import (
	"sync"
	"sync/atomic"
	"time"
)

// Direction says which way a packet travels relative to a leg's far end.
type Direction uint8

const (
	// In is a packet received from the leg's far end.
	In Direction = iota + 1
	// Out is a packet sent to the leg's far end (relayed or injected).
	Out
)

func (d Direction) String() string {
	switch d {
	case In:
		return "in"
	case Out:
		return "out"
	}
	return "unknown"
}

// Packet is one RTP packet shown to a Tap. It and its Raw slice are only
// valid during the TapRTP call: the relay reuses them for the next packet.
type Packet struct {
	Leg      *Leg
	Dir      Direction
	Header   Header
	Raw      []byte // the whole datagram
	At       time.Time
	Injected bool // sent by an Injection rather than relayed
}

// Payload returns the packet's payload (inside Raw).
func (p *Packet) Payload() []byte { return p.Header.Payload(p.Raw) }

// setTapped makes p the relayed packet raw (header h) of leg going dir at
// instant at, field by field: a composite literal stored into the leg's
// reused Packet is built on the stack and then copied with a bulk write
// barrier (runtime.wbMove), which cost the relay more than the tap it
// feeds.
func (p *Packet) setTapped(leg *Leg, dir Direction, h *Header, raw []byte, at time.Time) {
	p.Leg = leg
	p.Dir = dir
	p.Header = *h
	p.Raw = raw
	p.At = at
	p.Injected = false
}

// Tap observes the packets of a leg: every packet received from the far
// end (In, whether bridged or not) and every packet sent to it (Out). It
// is called synchronously on the relay goroutine, which may serve many
// legs, so it must return quickly, must not block and must not keep p or
// p.Raw after returning. It must not close any leg or session, nor the
// engine: closing a socket waits for the batch in progress of every relay
// thread, its own among them, and two threads each closing from a batch
// would wait for each other. A Tap that needs to do I/O should use
// NewQueueTap.
type Tap interface {
	TapRTP(p *Packet)
}

// TapFunc adapts a function to the Tap interface.
type TapFunc func(p *Packet)

// TapRTP calls f(p).
func (f TapFunc) TapRTP(p *Packet) { f(p) }

var tapsMu sync.Mutex // serialises copy-on-write updates of every leg's tap list

// tapEntry wraps an attached Tap so that detaching compares entries, not
// Tap values (a TapFunc is not comparable).
type tapEntry struct {
	Tap
	inOnly     bool // shown only packets received from the far end
	eventsOnly bool // and only those of the leg's telephone-event payload type
}

// AddTap attaches t to the leg and returns a function that detaches it.
// With no tap attached the relay pays one atomic load per packet.
func (l *Leg) AddTap(t Tap) (remove func()) { return l.addTap(&tapEntry{Tap: t}) }

// AddInTap attaches t to the leg so that it sees only the packets received
// from the far end (In), never those sent to it, and returns a function
// that detaches it. The relay does not call it, nor build a Packet for it,
// for packets it sends: a tap that keeps only what the far end says costs
// half as many calls as one attached with AddTap.
func (l *Leg) AddInTap(t Tap) (remove func()) { return l.addTap(&tapEntry{Tap: t, inOnly: true}) }

// AddEventTap attaches t to the leg so that it sees only the packets
// received from the far end (In) whose payload type is the leg's
// telephone-event type (see SetTelephoneEventPT; none while it is
// unknown), and returns a function that detaches it. Audio, nearly every
// packet, is not shown to it and builds no Packet: a DTMF detector costs
// the relay nothing until digits come (issue 16: the detector's tap on
// every leg of 1,000 calls).
func (l *Leg) AddEventTap(t Tap) (remove func()) {
	return l.addTap(&tapEntry{Tap: t, inOnly: true, eventsOnly: true})
}

func (l *Leg) addTap(e *tapEntry) (remove func()) {
	tapsMu.Lock()
	next := append([]*tapEntry(nil), l.allTaps...)
	l.storeTaps(append(next, e))
	tapsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			tapsMu.Lock()
			defer tapsMu.Unlock()
			var rest []*tapEntry
			for _, x := range l.allTaps {
				if x != e {
					rest = append(rest, x)
				}
			}
			l.storeTaps(rest)
		})
	}
}

// storeTaps publishes all as the leg's taps: those that see audio In
// packets, the event-only ones, and those not limited to In packets as its
// Out taps (nil lists when empty, so the relay pays one atomic load for
// each). It is called with tapsMu held; l.allTaps keeps all for the next
// change.
func (l *Leg) storeTaps(all []*tapEntry) {
	var in, events, out []*tapEntry
	for _, x := range all {
		switch {
		case x.eventsOnly:
			events = append(events, x)
		default:
			in = append(in, x)
		}
		if !x.inOnly {
			out = append(out, x)
		}
	}
	l.allTaps = all
	storeList(&l.taps, in)
	storeList(&l.eventTaps, events)
	storeList(&l.outTaps, out)
	if len(in) > 0 || len(out) > 0 || len(events) > 0 && l.tePT.Load() < 0 {
		l.resetOffload() // the tap needs the packets in the relay
	}
}

// storeList publishes list in p, nil when it is empty.
func storeList(p *atomic.Pointer[[]*tapEntry], list []*tapEntry) {
	if len(list) == 0 {
		p.Store(nil)
	} else {
		p.Store(&list)
	}
}

// showIn shows a packet received on l to its taps: those of every packet
// and, when it is a telephone event of the leg's payload type te, the
// event-only ones.
func (l *Leg) showIn(h *Header, pkt []byte, now time.Time, te int32) {
	taps := l.taps.Load()
	var events *[]*tapEntry
	if te >= 0 && int32(h.PayloadType) == te {
		events = l.eventTaps.Load()
	}
	if taps == nil && events == nil {
		return
	}
	p := &l.scratch
	p.setTapped(l, In, h, pkt, now)
	for _, list := range [2]*[]*tapEntry{taps, events} {
		if list != nil {
			for _, t := range *list {
				t.TapRTP(p)
			}
		}
	}
}

// TapPacket is a copy of a tapped packet, owned by the receiver.
type TapPacket struct {
	Leg      *Leg
	Dir      Direction
	Header   Header
	Raw      []byte
	At       time.Time
	Injected bool
}

// Payload returns the packet's payload (inside Raw).
func (p *TapPacket) Payload() []byte { return p.Header.Payload(p.Raw) }

// QueueTap is a Tap that copies packets into a bounded channel; when the
// consumer lags, packets are dropped and counted rather than stalling the
// relay.
type QueueTap struct {
	ch      chan TapPacket
	dropped atomic.Uint64
}

// NewQueueTap returns a QueueTap holding up to size packets.
func NewQueueTap(size int) *QueueTap {
	if size <= 0 {
		size = 1
	}
	return &QueueTap{ch: make(chan TapPacket, size)}
}

// TapRTP copies p into the queue or drops it when the queue is full.
func (q *QueueTap) TapRTP(p *Packet) {
	c := TapPacket{Leg: p.Leg, Dir: p.Dir, Header: p.Header, Raw: append([]byte(nil), p.Raw...), At: p.At, Injected: p.Injected}
	select {
	case q.ch <- c:
	default:
		q.dropped.Add(1)
	}
}

// C is the channel the copies arrive on. It is never closed.
func (q *QueueTap) C() <-chan TapPacket { return q.ch }

// Dropped is the number of packets dropped because the queue was full.
func (q *QueueTap) Dropped() uint64 { return q.dropped.Load() }
