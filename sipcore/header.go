package sipcore

import (
	"strings"

	"github.com/emiago/sipgo/sip"
)

// headerList is what sipgo's requests and responses offer to walk their
// headers in order.
type headerList interface{ Headers() []sip.Header }

// Header returns the first header of m named name, compared without regard
// to case as sipgo's GetHeader does, or nil. Unlike GetHeader it allocates
// nothing: sipgo lower-cases the name of every header it walks past, one
// allocation each for names outside its short list (Authorization,
// Expires, User-Agent, WWW-Authenticate...), about 13 per authenticated
// REGISTER.
func Header(m headerList, name string) sip.Header {
	for _, h := range m.Headers() {
		if strings.EqualFold(h.Name(), name) {
			return h
		}
	}
	return nil
}

// Headers returns the headers of m named name, in order, as sipgo's
// GetHeaders does, allocating only the result.
func Headers(m headerList, name string) []sip.Header {
	var out []sip.Header
	for _, h := range m.Headers() {
		if strings.EqualFold(h.Name(), name) {
			out = append(out, h)
		}
	}
	return out
}
