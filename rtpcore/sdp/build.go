package sdp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
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
	var scratch [512]byte // a body rarely needs more: no allocation
	body := scratch[:0]
	ipv := "IP4"
	if p.Addr.Is6() && !p.Addr.Is4In6() {
		ipv = "IP6"
	}
	addr := p.Addr.Unmap()
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	body = append(body, "s=pbx\r\nc=IN "...)
	body = append(body, ipv...)
	body = append(body, ' ')
	body = addr.AppendTo(body)
	body = append(body, "\r\nt=0 0\r\n"...)
	audioDone := false
	for _, m := range p.Mirror {
		if m.Type == "audio" && !audioDone {
			body = appendAudio(body, p)
			audioDone = true
			continue
		}
		body = append(body, "m="...)
		body = append(body, m.Type...)
		body = append(body, " 0 "...)
		body = append(body, m.Proto...)
		if len(m.Formats) == 0 {
			body = append(body, " 0"...)
		}
		for _, f := range m.Formats {
			body = append(body, ' ')
			body = append(body, f...)
		}
		body = append(body, "\r\n"...)
	}
	if !audioDone {
		body = appendAudio(body, p)
	}

	o.mu.Lock()
	if o.id == 0 {
		fresh := NewOrigin()
		o.id, o.version = fresh.id, fresh.version
	}
	if o.last != nil && !bytes.Equal(o.last, body) {
		o.version++
	}
	o.last = append(o.last[:0], body...)
	id, ver := o.id, o.version
	o.mu.Unlock()

	user := o.Username
	if user == "" {
		user = "pbx"
	}
	out := make([]byte, 0, len(body)+96)
	out = append(out, "v=0\r\no="...)
	out = append(out, user...)
	out = append(out, ' ')
	out = strconv.AppendUint(out, id, 10)
	out = append(out, ' ')
	out = strconv.AppendUint(out, ver, 10)
	out = append(out, " IN "...)
	out = append(out, ipv...)
	out = append(out, ' ')
	out = addr.AppendTo(out)
	out = append(out, "\r\n"...)
	return append(out, body...)
}

// appendAudio appends the audio m= section p describes.
func appendAudio(b []byte, p Params) []byte {
	b = append(b, "m=audio "...)
	b = strconv.AppendInt(b, int64(p.Port), 10)
	b = append(b, " RTP/AVP"...)
	for _, c := range p.Codecs {
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(c.PayloadType), 10)
	}
	if p.TelephoneEvent != nil {
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(p.TelephoneEvent.PayloadType), 10)
	}
	if len(p.Codecs) == 0 && p.TelephoneEvent == nil {
		// An m= line needs a format even when it carries nothing usable;
		// an unmapped dynamic type names no codec.
		b = append(b, " 96"...)
	}
	b = append(b, "\r\n"...)
	for _, c := range p.Codecs {
		b = appendRtpmap(b, c)
	}
	if te := p.TelephoneEvent; te != nil {
		b = appendRtpmap(b, *te)
	}
	ptime := p.Ptime
	if ptime <= 0 {
		ptime = DefaultPtime
	}
	b = append(b, "a=ptime:"...)
	b = strconv.AppendInt(b, int64(ptime), 10)
	b = append(b, "\r\n"...)
	if p.RTCP && p.Port > 0 && p.Port < 65535 {
		b = append(b, "a=rtcp:"...)
		b = strconv.AppendInt(b, int64(p.Port+1), 10)
		b = append(b, "\r\n"...)
	}
	dir := p.Direction
	if dir == "" {
		dir = SendRecv
	}
	b = append(b, "a="...)
	b = append(b, dir...)
	return append(b, "\r\n"...)
}

// appendRtpmap appends c's a=rtpmap line and its a=fmtp line if any.
func appendRtpmap(b []byte, c Codec) []byte {
	b = append(b, "a=rtpmap:"...)
	b = strconv.AppendUint(b, uint64(c.PayloadType), 10)
	b = append(b, ' ')
	b = append(b, c.Name...)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(c.ClockRate), 10)
	if c.Channels > 1 {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(c.Channels), 10)
	}
	b = append(b, "\r\n"...)
	if c.Fmtp != "" {
		b = append(b, "a=fmtp:"...)
		b = strconv.AppendUint(b, uint64(c.PayloadType), 10)
		b = append(b, ' ')
		b = append(b, c.Fmtp...)
		b = append(b, "\r\n"...)
	}
	return b
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
