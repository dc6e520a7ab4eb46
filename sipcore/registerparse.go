package sipcore

import (
	"bytes"
	"errors"
	"strings"

	"github.com/emiago/sipgo/sip"
)

// errNotRequest is a datagram that parsed as a response.
var errNotRequest = errors.New("not a request")

// parseRegister parses a REGISTER datagram into what sipgo's parser p
// makes of it, for fewer allocations in the usual case: the header block
// is copied into one string and every header value is a slice of it
// (sipgo copies each line, then each value, and each name of a header it
// does not parse), and sipgo's own parsers read the headers it parses.
// Anything unusual (a body, a folded line, a bare CR or LF, a list of
// values in a parsed header) is left to p. The request's strings share
// the message's text, so what outlives the request copies them.
func parseRegister(p *sip.Parser, data []byte) (*sip.Request, error) {
	if req, ok := parseRegisterFast(data); ok {
		return req, nil
	}
	msg, err := p.ParseSIP(data)
	if err != nil {
		return nil, err
	}
	req, ok := msg.(*sip.Request)
	if !ok {
		return nil, errNotRequest
	}
	return req, nil
}

// fastHeader is one of sipgo's header parsers and the lower-case name it
// is called with.
type fastHeader struct {
	parse sip.HeaderParser
	name  []byte
}

// fastHeaders are sipgo's header parsers by lower-case name, compact forms
// included.
var fastHeaders = func() map[string]fastHeader {
	compact := map[string]string{"c": "content-type", "f": "from", "t": "to", "m": "contact",
		"i": "call-id", "v": "via", "l": "content-length"}
	m := map[string]fastHeader{}
	for k, p := range sip.DefaultHeadersParser() {
		name := k
		if full, ok := compact[k]; ok {
			name = full
		}
		m[k] = fastHeader{parse: p, name: []byte(name)}
	}
	return m
}()

// parseRegisterFast is parseRegister's own parse; false leaves data to
// sipgo.
func parseRegisterFast(data []byte) (*sip.Request, bool) {
	end := bytes.Index(data, []byte("\r\n\r\n"))
	if end < 0 || end+4 != len(data) {
		return nil, false // a body, or no end of headers
	}
	text := string(data[:end+2]) // every line ends in CRLF
	if lines := strings.Count(text, "\r\n"); strings.Count(text, "\n") != lines || strings.Count(text, "\r") != lines {
		return nil, false // a bare CR or LF
	}
	i := strings.Index(text, "\r\n")
	line, rest := text[:i], text[i+2:]
	sp1, sp2 := strings.IndexByte(line, ' '), strings.LastIndexByte(line, ' ')
	if sp1 < 0 || sp2 <= sp1 || line[:sp1] != string(sip.REGISTER) {
		return nil, false
	}
	var uri sip.Uri
	if err := sip.ParseUri(line[sp1+1:sp2], &uri); err != nil {
		return nil, false
	}
	req := sip.NewRequest(sip.REGISTER, uri)
	req.SipVersion = line[sp2+1:]
	for rest != "" {
		i := strings.Index(rest, "\r\n")
		line, rest = rest[:i], rest[i+2:]
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			return nil, false
		}
		colon := strings.IndexByte(line, ':')
		if colon < 0 {
			return nil, false
		}
		name, value := strings.TrimSpace(line[:colon]), strings.TrimSpace(line[colon+1:])
		if fh, ok := lookupFastHeader(name); ok {
			if strings.IndexByte(value, ',') >= 0 {
				return nil, false // a list, or a comma in a quoted string: sipgo's loop
			}
			h, err := fh.parse(fh.name, value)
			if err != nil {
				return nil, false
			}
			req.AppendHeader(h)
			continue
		}
		req.AppendHeader(sip.NewHeader(name, value))
	}
	if cl := req.ContentLength(); cl != nil && *cl != 0 {
		return nil, false
	}
	return req, true
}

// lookupFastHeader finds name's parser, case-insensitively, without
// allocating.
func lookupFastHeader(name string) (fastHeader, bool) {
	var lower [32]byte
	if len(name) > len(lower) {
		return fastHeader{}, false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	fh, ok := fastHeaders[string(lower[:len(name)])]
	return fh, ok
}
