package sdp

import (
	"fmt"
	"strings"
)

// Codec is one payload format of an audio stream.
type Codec struct {
	Name        string // encoding name as in a=rtpmap, e.g. "PCMA"
	PayloadType uint8
	ClockRate   uint32
	Channels    int    // 0 or 1 for mono
	Fmtp        string // a=fmtp parameters, without the payload type
}

// The codecs the PBX speaks, with their default payload types.
var (
	PCMA           = Codec{Name: "PCMA", PayloadType: 8, ClockRate: 8000}
	PCMU           = Codec{Name: "PCMU", PayloadType: 0, ClockRate: 8000}
	TelephoneEvent = Codec{Name: "telephone-event", PayloadType: 101, ClockRate: 8000, Fmtp: "0-16"}
)

// DefaultCodecs is the media.codecs default: [alaw, ulaw].
var DefaultCodecs = []Codec{PCMA, PCMU}

// CodecByName maps a media.codecs name ("alaw", "ulaw"; "PCMA" and
// "PCMU" too, in any case) to its codec.
func CodecByName(name string) (Codec, error) {
	switch strings.ToLower(name) {
	case "alaw", "pcma":
		return PCMA, nil
	case "ulaw", "pcmu":
		return PCMU, nil
	}
	return Codec{}, fmt.Errorf("codec %q: %w", name, ErrUnknownCodec)
}

// CodecsByName maps a media.codecs list to codecs, keeping its order and
// dropping duplicates. An empty list gives DefaultCodecs.
func CodecsByName(names []string) ([]Codec, error) {
	if len(names) == 0 {
		return append([]Codec(nil), DefaultCodecs...), nil
	}
	var out []Codec
	for _, n := range names {
		c, err := CodecByName(n)
		if err != nil {
			return nil, err
		}
		if !containsCodec(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Same reports whether c and o are the same format (name and clock
// rate), whatever their payload types.
func (c Codec) Same(o Codec) bool {
	return strings.EqualFold(c.Name, o.Name) && c.ClockRate == o.ClockRate
}

// IsTelephoneEvent reports whether c is RFC 4733 telephone-event.
func (c Codec) IsTelephoneEvent() bool {
	return strings.EqualFold(c.Name, "telephone-event")
}

func (c Codec) String() string {
	return fmt.Sprintf("%s/%d(%d)", c.Name, c.ClockRate, c.PayloadType)
}

func containsCodec(list []Codec, c Codec) bool {
	for _, x := range list {
		if x.Same(c) {
			return true
		}
	}
	return false
}

// staticCodec returns the RFC 3551 static assignment of pt, used when an
// m= line lists a static payload type without a=rtpmap.
func staticCodec(pt uint8) (Codec, bool) {
	switch pt {
	case 0:
		return PCMU, true
	case 3:
		return Codec{Name: "GSM", PayloadType: 3, ClockRate: 8000}, true
	case 4:
		return Codec{Name: "G723", PayloadType: 4, ClockRate: 8000}, true
	case 8:
		return PCMA, true
	case 9:
		return Codec{Name: "G722", PayloadType: 9, ClockRate: 8000}, true
	case 18:
		return Codec{Name: "G729", PayloadType: 18, ClockRate: 8000}, true
	}
	return Codec{}, false
}

// Negotiate returns the codecs of the offer's audio stream that are also
// in codecs (the PBX's configured list), in the PBX's order and with the
// offer's payload types, so an answer uses the numbers the offerer
// chose. Telephone-event is not part of the result; see
// Description.TelephoneEvent. It returns ErrNoCommonCodec when nothing
// matches.
func Negotiate(offer *Description, codecs []Codec) ([]Codec, error) {
	if offer == nil {
		return nil, ErrNoCommonCodec
	}
	var out []Codec
	for _, want := range codecs {
		for _, c := range offer.Codecs {
			if c.Same(want) && !containsCodec(out, c) {
				out = append(out, c)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, ErrNoCommonCodec
	}
	return out, nil
}
