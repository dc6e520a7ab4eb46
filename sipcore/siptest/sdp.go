package siptest

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// SDP is the part of a session description a test phone cares about.
type SDP struct {
	Addr      netip.AddrPort // audio address (c= and m= port)
	Codecs    []uint8        // payload types of the m= line
	Direction string         // sendrecv, sendonly, recvonly, inactive
}

// ParseSDP reads the first audio stream of body.
func ParseSDP(body []byte) (*SDP, error) {
	if len(body) == 0 {
		return nil, errors.New("empty sdp")
	}
	s := &SDP{Direction: "sendrecv"}
	var ip netip.Addr
	port := -1
	for _, line := range strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "c=IN IP4 "), strings.HasPrefix(line, "c=IN IP6 "):
			a, err := netip.ParseAddr(strings.TrimSpace(line[9:]))
			if err != nil {
				return nil, fmt.Errorf("sdp c= line: %w", err)
			}
			ip = a
		case strings.HasPrefix(line, "m=audio "):
			f := strings.Fields(line[2:])
			if len(f) < 4 {
				return nil, errors.New("sdp m= line")
			}
			p, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, fmt.Errorf("sdp m= port: %w", err)
			}
			port = p
			for _, pt := range f[3:] {
				n, err := strconv.Atoi(pt)
				if err == nil && n < 96 {
					s.Codecs = append(s.Codecs, uint8(n))
				}
			}
		case line == "a=sendrecv", line == "a=sendonly", line == "a=recvonly", line == "a=inactive":
			s.Direction = line[2:]
		}
	}
	if port < 0 || !ip.IsValid() {
		return nil, errors.New("sdp without audio address")
	}
	s.Addr = netip.AddrPortFrom(ip, uint16(port))
	return s, nil
}

var codecNames = map[uint8]string{0: "PCMU", 8: "PCMA"}

// BuildSDP renders an offer or answer on 127.0.0.1 with the given payload
// types (plus telephone-event 101) and direction.
func BuildSDP(port int, codecs []uint8, direction string) []byte {
	return BuildSDPEvent(port, codecs, direction, 101)
}

// BuildSDPEvent is BuildSDP with telephone-event on payload type te; te 0
// leaves telephone-event out.
func BuildSDPEvent(port int, codecs []uint8, direction string, te uint8) []byte {
	var b bytes.Buffer
	b.WriteString("v=0\r\no=siptest 1 1 IN IP4 127.0.0.1\r\ns=siptest\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n")
	fmt.Fprintf(&b, "m=audio %d RTP/AVP", port)
	for _, c := range codecs {
		fmt.Fprintf(&b, " %d", c)
	}
	if te != 0 {
		fmt.Fprintf(&b, " %d", te)
	}
	b.WriteString("\r\n")
	for _, c := range codecs {
		if n, ok := codecNames[c]; ok {
			fmt.Fprintf(&b, "a=rtpmap:%d %s/8000\r\n", c, n)
		}
	}
	if te != 0 {
		fmt.Fprintf(&b, "a=rtpmap:%d telephone-event/8000\r\na=fmtp:%d 0-16\r\n", te, te)
	}
	b.WriteString("a=ptime:20\r\n")
	if direction == "" {
		direction = "sendrecv"
	}
	b.WriteString("a=" + direction + "\r\n")
	return b.Bytes()
}
