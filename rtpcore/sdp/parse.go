package sdp

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Direction is a stream's a=sendrecv / sendonly / recvonly / inactive.
type Direction string

// Directions of RFC 3264.
const (
	SendRecv Direction = "sendrecv"
	SendOnly Direction = "sendonly"
	RecvOnly Direction = "recvonly"
	Inactive Direction = "inactive"
)

// Answer returns the direction an answerer uses toward an offer with
// direction d: sendonly is answered recvonly and the reverse.
func (d Direction) Answer() Direction {
	switch d {
	case SendOnly:
		return RecvOnly
	case RecvOnly:
		return SendOnly
	case Inactive:
		return Inactive
	}
	return SendRecv
}

// Sends reports whether a party with direction d sends media.
func (d Direction) Sends() bool { return d == "" || d == SendRecv || d == SendOnly }

// Receives reports whether a party with direction d receives media.
func (d Direction) Receives() bool { return d == "" || d == SendRecv || d == RecvOnly }

func parseDirection(s string) (Direction, bool) {
	switch Direction(s) {
	case SendRecv, SendOnly, RecvOnly, Inactive:
		return Direction(s), true
	}
	return "", false
}

// OriginLine is a parsed o= line.
type OriginLine struct {
	Username  string
	SessionID string
	Version   string
	Addr      string
}

// Media is one m= section.
type Media struct {
	Type    string   // "audio", "video", ...
	Port    int      // 0 for a disabled stream
	Proto   string   // "RTP/AVP", ...
	Formats []string // the m= line's formats as written
	// Addr is the media-level c= address; invalid when absent.
	Addr netip.Addr
	// Codecs are the stream's payload formats in m= order, without
	// telephone-event; static types without a=rtpmap get their RFC 3551
	// names; dynamic types without a=rtpmap are left out.
	Codecs []Codec
	// TelephoneEvent is the telephone-event/8000 format, nil when absent.
	TelephoneEvent *Codec
	Direction      Direction // media-level attribute; empty when absent
	Ptime          int       // milliseconds; 0 when absent
	RTCPPort       int       // a=rtcp port; 0 when absent
	RTCPMux        bool
}

// Description is a parsed SDP body. The flat fields describe the first
// audio stream, which is the one the PBX relays.
type Description struct {
	Origin      OriginLine
	SessionName string
	// SessionAddr is the session-level c= address; invalid when absent.
	SessionAddr      netip.Addr
	SessionDirection Direction // session-level attribute; empty when absent
	Media            []Media
	AudioIndex       int // index of the audio stream in Media

	// Addr is the audio stream's connection address (media level, else
	// session level). 0.0.0.0 means hold in the RFC 2543 style.
	Addr netip.Addr
	// Port is the audio m= port; 0 means the stream is disabled.
	Port   int
	Codecs []Codec
	// TelephoneEvent is the offered telephone-event format, nil if none.
	TelephoneEvent *Codec
	// Direction is the effective direction of the audio stream: media
	// level, else session level, else sendrecv.
	Direction Direction
	Ptime     int
	RTCPPort  int
}

// AudioAddr is the address and port to send the audio stream to.
func (d *Description) AudioAddr() netip.AddrPort {
	if !d.Addr.IsValid() {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(d.Addr, uint16(d.Port))
}

// Hold reports whether the description puts the stream on hold: a
// sendonly or inactive direction, or the RFC 2543 c=0.0.0.0.
func (d *Description) Hold() bool {
	return d.Direction == SendOnly || d.Direction == Inactive || (d.Addr.IsValid() && d.Addr.IsUnspecified())
}

// maxSDP bounds the body Parse accepts.
const maxSDP = 64 << 10

// Parse parses an SDP body. It needs v=, a connection address for the
// audio stream and an audio m= line.
func Parse(body []byte) (*Description, error) {
	if len(body) > maxSDP {
		return nil, fmt.Errorf("sdp of %d bytes: %w", len(body), ErrMalformed)
	}
	d := &Description{AudioIndex: -1}
	haveV := false
	var cur *Media
	// Per-media rtpmap and fmtp attributes, filled while the section is
	// open; a few per body, so slices (on the stack) searched from the end,
	// the last attribute for a payload type winning, instead of maps.
	var rtpmapBuf [8]rtpmapAttr
	var fmtpBuf [4]fmtpAttr
	rtpmaps, fmtps := rtpmapBuf[:0], fmtpBuf[:0]
	text := string(body)
	for n := 0; text != ""; n++ {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(line) < 2 || line[1] != '=' {
			return nil, fmt.Errorf("line %d %q: %w", n+1, clip(line), ErrMalformed)
		}
		val := line[2:]
		switch line[0] {
		case 'v':
			if strings.TrimSpace(val) != "0" {
				return nil, fmt.Errorf("version %q: %w", clip(val), ErrMalformed)
			}
			haveV = true
		case 'o':
			// A malformed origin does not stop the media; keep what is there.
			f := strings.Fields(val)
			if len(f) == 6 {
				d.Origin = OriginLine{Username: f[0], SessionID: f[1], Version: f[2], Addr: f[5]}
			}
		case 's':
			d.SessionName = val
		case 'c':
			a, err := parseConnection(val)
			if err != nil {
				return nil, err
			}
			if cur != nil {
				cur.Addr = a
			} else {
				d.SessionAddr = a
			}
		case 'm':
			m, err := parseMediaLine(val)
			if err != nil {
				return nil, err
			}
			d.Media = append(d.Media, m)
			cur = &d.Media[len(d.Media)-1]
		case 'a':
			name, arg, _ := strings.Cut(val, ":")
			if dir, ok := parseDirection(name); ok {
				if cur != nil {
					cur.Direction = dir
				} else {
					d.SessionDirection = dir
				}
				continue
			}
			if cur == nil {
				continue
			}
			idx := len(d.Media) - 1
			switch name {
			case "rtpmap":
				pt, c, ok := parseRtpmap(arg)
				if !ok {
					continue // ignore a malformed rtpmap, as most stacks do
				}
				rtpmaps = append(rtpmaps, rtpmapAttr{media: idx, pt: pt, codec: c})
			case "fmtp":
				ptS, params, _ := strings.Cut(arg, " ")
				pt, err := strconv.ParseUint(ptS, 10, 7)
				if err != nil {
					continue
				}
				fmtps = append(fmtps, fmtpAttr{media: idx, pt: uint8(pt), params: strings.TrimSpace(params)})
			case "ptime":
				if p, err := strconv.Atoi(strings.TrimSpace(arg)); err == nil && p > 0 && p <= 1000 {
					cur.Ptime = p
				}
			case "rtcp":
				portS, _, _ := strings.Cut(strings.TrimSpace(arg), " ")
				if p, err := strconv.Atoi(portS); err == nil && p > 0 && p <= 65535 {
					cur.RTCPPort = p
				}
			case "rtcp-mux":
				cur.RTCPMux = true
			}
		}
	}
	if !haveV {
		return nil, fmt.Errorf("no v= line: %w", ErrMalformed)
	}
	for i := range d.Media {
		m := &d.Media[i]
		m.resolveFormats(i, rtpmaps, fmtps)
		if d.AudioIndex < 0 && m.Type == "audio" {
			d.AudioIndex = i
		}
	}
	if d.AudioIndex < 0 {
		return nil, ErrNoAudio
	}
	if err := d.flattenAudio(); err != nil {
		return nil, err
	}
	return d, nil
}

// resolveFormats fills the codecs and telephone-event of stream m, the
// stream at index media, from its m= formats: each RTP payload type named
// by its last a=rtpmap (else its RFC 3551 static name) with its last a=fmtp.
func (m *Media) resolveFormats(media int, rtpmaps []rtpmapAttr, fmtps []fmtpAttr) {
	for _, f := range m.Formats {
		pt64, err := strconv.ParseUint(f, 10, 7)
		if err != nil {
			continue // not an RTP payload type (another protocol)
		}
		pt := uint8(pt64)
		c, ok := findRtpmap(rtpmaps, media, pt)
		if !ok {
			c, ok = staticCodec(pt)
			if !ok {
				continue
			}
		}
		c.PayloadType = pt
		c.Fmtp = findFmtp(fmtps, media, pt)
		if c.IsTelephoneEvent() {
			if m.TelephoneEvent == nil && c.ClockRate == 8000 {
				te := c
				m.TelephoneEvent = &te
			}
			continue
		}
		m.Codecs = append(m.Codecs, c)
	}
}

// flattenAudio copies the audio stream (d.AudioIndex) into d's flat fields,
// its address and direction falling back to the session level's.
func (d *Description) flattenAudio() error {
	a := &d.Media[d.AudioIndex]
	d.Addr = a.Addr
	if !d.Addr.IsValid() {
		d.Addr = d.SessionAddr
	}
	if !d.Addr.IsValid() && a.Port != 0 {
		return fmt.Errorf("audio stream without connection address: %w", ErrMalformed)
	}
	d.Port = a.Port
	d.Codecs = a.Codecs
	d.TelephoneEvent = a.TelephoneEvent
	d.Direction = a.Direction
	if d.Direction == "" {
		d.Direction = d.SessionDirection
	}
	if d.Direction == "" {
		d.Direction = SendRecv
	}
	d.Ptime = a.Ptime
	d.RTCPPort = a.RTCPPort
	return nil
}

// rtpmapAttr is an a=rtpmap of stream media.
type rtpmapAttr struct {
	media int
	pt    uint8
	codec Codec
}

// fmtpAttr is an a=fmtp of stream media.
type fmtpAttr struct {
	media  int
	pt     uint8
	params string
}

// findRtpmap is the last rtpmap of stream media for payload type pt.
func findRtpmap(as []rtpmapAttr, media int, pt uint8) (Codec, bool) {
	for i := len(as) - 1; i >= 0; i-- {
		if as[i].media == media && as[i].pt == pt {
			return as[i].codec, true
		}
	}
	return Codec{}, false
}

// findFmtp is the last fmtp of stream media for payload type pt ("" when
// none).
func findFmtp(as []fmtpAttr, media int, pt uint8) string {
	for i := len(as) - 1; i >= 0; i-- {
		if as[i].media == media && as[i].pt == pt {
			return as[i].params
		}
	}
	return ""
}

// parseConnection parses "IN IP4 192.0.2.1" (a multicast /ttl suffix is
// dropped).
func parseConnection(val string) (netip.Addr, error) {
	f := strings.Fields(val)
	if len(f) != 3 || f[0] != "IN" || (f[1] != "IP4" && f[1] != "IP6") {
		return netip.Addr{}, fmt.Errorf("connection %q: %w", clip(val), ErrMalformed)
	}
	host, _, _ := strings.Cut(f[2], "/")
	a, err := netip.ParseAddr(host)
	if err != nil || (f[1] == "IP4") != a.Is4() || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("connection address %q: %w", clip(f[2]), ErrMalformed)
	}
	return a, nil
}

// parseMediaLine parses "audio 49170 RTP/AVP 0 8 101".
func parseMediaLine(val string) (Media, error) {
	f := strings.Fields(val)
	if len(f) < 4 {
		return Media{}, fmt.Errorf("media %q: %w", clip(val), ErrMalformed)
	}
	portS, _, _ := strings.Cut(f[1], "/")
	port, err := strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return Media{}, fmt.Errorf("media port %q: %w", clip(f[1]), ErrMalformed)
	}
	return Media{Type: f[0], Port: port, Proto: f[2], Formats: f[3:]}, nil
}

// parseRtpmap parses "101 telephone-event/8000" or "0 PCMU/8000/1".
func parseRtpmap(arg string) (uint8, Codec, bool) {
	ptS, enc, ok := strings.Cut(strings.TrimSpace(arg), " ")
	if !ok {
		return 0, Codec{}, false
	}
	pt, err := strconv.ParseUint(ptS, 10, 7)
	if err != nil {
		return 0, Codec{}, false
	}
	// name/rate or name/rate/channels, cut without allocating.
	enc = strings.TrimSpace(enc)
	slashes := strings.Count(enc, "/")
	name, rest, _ := strings.Cut(enc, "/")
	rateS, chS, _ := strings.Cut(rest, "/")
	if slashes < 1 || slashes > 2 || name == "" || strings.ContainsAny(name, " \t") {
		return 0, Codec{}, false
	}
	rate, err := strconv.ParseUint(rateS, 10, 32)
	if err != nil || rate == 0 {
		return 0, Codec{}, false
	}
	c := Codec{Name: name, PayloadType: uint8(pt), ClockRate: uint32(rate)}
	if slashes == 2 {
		ch, err := strconv.Atoi(chS)
		if err != nil || ch < 1 || ch > 255 {
			return 0, Codec{}, false
		}
		c.Channels = ch
	}
	return uint8(pt), c, true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
