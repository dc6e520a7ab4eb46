package sdp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
)

// DefaultPtime is the packetisation time the PBX writes (milliseconds).
const DefaultPtime = 20

// Origin produces the o= line of one leg's descriptions: a stable session
// id and a version that rises whenever the content changes, so a
// re-offer for hold or resume carries a new version while a session
// refresh with the same content repeats the old one (RFC 3264 §8). It is
// safe for concurrent use.
type Origin struct {
	Username string // "pbx" when empty

	mu      sync.Mutex
	id      uint64
	version uint64
	last    []byte // body of the last build, without the o= line
}

// NewOrigin returns an Origin with a random session id.
func NewOrigin() *Origin {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := binary.BigEndian.Uint64(b[:]) >> 2 // keep it well inside int64 for picky parsers
	return &Origin{id: id, version: id}
}

// SessionID returns the session id.
func (o *Origin) SessionID() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.id
}

// Version returns the version of the last description built.
func (o *Origin) Version() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.version
}

// Params are the contents of one PBX description.
type Params struct {
	Addr   netip.Addr // the advertised media address
	Port   int        // the leg's RTP port; 0 rejects the stream
	Codecs []Codec    // in preference order
	// TelephoneEvent is written after the codecs when non-nil.
	TelephoneEvent *Codec
	Direction      Direction // empty means sendrecv
	Ptime          int       // zero means DefaultPtime
	RTCP           bool      // write a=rtcp:Port+1
	// Mirror, when answering, holds the offer's m= sections: the answer
	// repeats them in order, the first audio one filled from these
	// Params and the others rejected with port 0.
	Mirror []Media
}

// Build renders p. The o= version rises when the rendered content differs
// from the last build of this Origin.
func (o *Origin) Build(p Params) []byte {
	var body bytes.Buffer
	ipv := "IP4"
	if p.Addr.Is6() && !p.Addr.Is4In6() {
		ipv = "IP6"
	}
	addr := p.Addr.Unmap()
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	fmt.Fprintf(&body, "s=pbx\r\nc=IN %s %s\r\nt=0 0\r\n", ipv, addr)
	audioDone := false
	for _, m := range p.Mirror {
		if m.Type == "audio" && !audioDone {
			writeAudio(&body, p)
			audioDone = true
			continue
		}
		fmts := m.Formats
		if len(fmts) == 0 {
			fmts = []string{"0"}
		}
		body.WriteString("m=" + m.Type + " 0 " + m.Proto)
		for _, f := range fmts {
			body.WriteString(" " + f)
		}
		body.WriteString("\r\n")
	}
	if !audioDone {
		writeAudio(&body, p)
	}

	o.mu.Lock()
	if o.id == 0 {
		fresh := NewOrigin()
		o.id, o.version = fresh.id, fresh.version
	}
	if o.last != nil && !bytes.Equal(o.last, body.Bytes()) {
		o.version++
	}
	o.last = append(o.last[:0], body.Bytes()...)
	id, ver := o.id, o.version
	o.mu.Unlock()

	user := o.Username
	if user == "" {
		user = "pbx"
	}
	out := make([]byte, 0, body.Len()+96)
	out = append(out, "v=0\r\no="...)
	out = append(out, user...)
	out = append(out, ' ')
	out = strconv.AppendUint(out, id, 10)
	out = append(out, ' ')
	out = strconv.AppendUint(out, ver, 10)
	out = append(out, " IN "+ipv+" "+addr.String()+"\r\n"...)
	return append(out, body.Bytes()...)
}

func writeAudio(b *bytes.Buffer, p Params) {
	fmt.Fprintf(b, "m=audio %d RTP/AVP", p.Port)
	for _, c := range p.Codecs {
		fmt.Fprintf(b, " %d", c.PayloadType)
	}
	if p.TelephoneEvent != nil {
		fmt.Fprintf(b, " %d", p.TelephoneEvent.PayloadType)
	}
	if len(p.Codecs) == 0 && p.TelephoneEvent == nil {
		// An m= line needs a format even when it carries nothing usable;
		// an unmapped dynamic type names no codec.
		b.WriteString(" 96")
	}
	b.WriteString("\r\n")
	for _, c := range p.Codecs {
		writeRtpmap(b, c)
	}
	if te := p.TelephoneEvent; te != nil {
		writeRtpmap(b, *te)
	}
	ptime := p.Ptime
	if ptime <= 0 {
		ptime = DefaultPtime
	}
	fmt.Fprintf(b, "a=ptime:%d\r\n", ptime)
	if p.RTCP && p.Port > 0 && p.Port < 65535 {
		fmt.Fprintf(b, "a=rtcp:%d\r\n", p.Port+1)
	}
	dir := p.Direction
	if dir == "" {
		dir = SendRecv
	}
	b.WriteString("a=" + string(dir) + "\r\n")
}

func writeRtpmap(b *bytes.Buffer, c Codec) {
	fmt.Fprintf(b, "a=rtpmap:%d %s/%d", c.PayloadType, c.Name, c.ClockRate)
	if c.Channels > 1 {
		fmt.Fprintf(b, "/%d", c.Channels)
	}
	b.WriteString("\r\n")
	if c.Fmtp != "" {
		fmt.Fprintf(b, "a=fmtp:%d %s\r\n", c.PayloadType, c.Fmtp)
	}
}

// Offer builds the PBX's offer: codecs in the given order (the configured
// list, or the set negotiated with the other leg), telephone-event/8000 as
// payload type 101 and the given direction (empty means sendrecv).
func (o *Origin) Offer(addr netip.Addr, port int, codecs []Codec, dir Direction) []byte {
	te := TelephoneEvent
	return o.Build(Params{Addr: addr, Port: port, Codecs: codecs, TelephoneEvent: &te, Direction: dir})
}

// Answer negotiates offer against codecs (the PBX's list, or the set
// already agreed with the other leg) and builds the answer: the common
// codecs in the PBX's order with the offer's payload types, telephone-event
// with the offer's payload type when offered, and dir (empty means the
// answer to the offer's direction). Other m= sections are rejected. It
// returns ErrNoCommonCodec when nothing matches.
func (o *Origin) Answer(offer *Description, addr netip.Addr, port int, codecs []Codec, dir Direction) ([]byte, []Codec, error) {
	common, err := Negotiate(offer, codecs)
	if err != nil {
		return nil, nil, err
	}
	if dir == "" {
		dir = offer.Direction.Answer()
	}
	p := Params{Addr: addr, Port: port, Codecs: common, Direction: dir, Mirror: offer.Media}
	if offer.TelephoneEvent != nil {
		te := *offer.TelephoneEvent
		p.TelephoneEvent = &te
	}
	return o.Build(p), common, nil
}

// Rewrite re-renders a parsed description with the PBX's address and
// port: the same codecs, telephone-event, direction and ptime, other m=
// sections kept (disabled). It is how a description crosses the B2BUA
// when no renegotiation is wanted.
func (o *Origin) Rewrite(d *Description, addr netip.Addr, port int) []byte {
	p := Params{Addr: addr, Port: port, Codecs: d.Codecs, Direction: d.Direction, Ptime: d.Ptime, Mirror: d.Media}
	if d.TelephoneEvent != nil {
		te := *d.TelephoneEvent
		p.TelephoneEvent = &te
	}
	if d.Port == 0 {
		p.Port = 0
	}
	return o.Build(p)
}
