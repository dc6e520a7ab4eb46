package sipcore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net"
	"sync"

	"github.com/emiago/sipgo/sip"
)

// NewResponse builds the response to a received request req with code and reason as sipgo's
// NewResponseFromRequest does (RFC 3261 8.2.6: Via, From, To, Call-ID and
// CSeq from the request, Record-Route for a dialog-creating answer other
// than to REGISTER, received and rport for RFC 3581, a To tag unless 100),
// for less: From, Call-ID, CSeq, the Record-Routes and the Vias below the
// top one are the request's own headers, not copies (nothing writes to a
// header once parsed; a caller that means to change one of them on the
// response replaces it), the top Via is copied only to take received and
// rport, To only to take a tag, and the tag comes from the runtime's
// per-thread generator rather than a UUID from the system's. This runs
// twice for every registration (401, then 200).
func NewResponse(req *sip.Request, code int, reason string) *sip.Response {
	res := sip.NewResponse(code, reason)
	res.SipVersion = req.SipVersion
	allowedStatus := (code >= 180 && code < 190) || (code >= 200 && code < 300)
	earlyInvite := req.IsInvite() && code > 100 && code < 200
	copyRR := req.Method != sip.REGISTER && !req.IsAck() && (allowedStatus || earlyInvite)
	if copyRR {
		for _, h := range req.Headers() {
			if rr, ok := h.(*sip.RecordRouteHeader); ok {
				res.AppendHeader(rr)
			}
		}
	}
	top := true
	for _, h := range req.Headers() {
		if v, ok := h.(*sip.ViaHeader); ok {
			if top {
				top = false
				v = responseVia(req, v)
			}
			res.AppendHeader(v)
		}
	}
	if h := req.From(); h != nil {
		res.AppendHeader(h)
	}
	if h := req.To(); h != nil {
		if code != 100 && !h.Params.Has("tag") {
			h = taggedTo(h)
		}
		res.AppendHeader(h)
	}
	if h := req.CallID(); h != nil {
		res.AppendHeader(h)
	}
	if h := req.CSeq(); h != nil {
		res.AppendHeader(h)
	}
	if code == 100 {
		if h := req.GetHeader("Timestamp"); h != nil {
			res.AppendHeader(h)
		}
	}
	res.SetBody(nil) // Content-Length: 0, which a stream transport needs
	res.SetTransport(req.Transport())
	res.SetDestination(req.Source())
	return res
}

// responseVia is the top Via of a response to req: v itself, or a copy
// with received and the source port when v asks for rport (RFC 3581 4).
func responseVia(req *sip.Request, v *sip.ViaHeader) *sip.ViaHeader {
	if val, ok := v.Params.Get("rport"); !ok || val != "" {
		return v
	}
	c := *v
	c.Params = make(sip.HeaderParams, len(v.Params), len(v.Params)+2)
	copy(c.Params, v.Params)
	host, port, _ := net.SplitHostPort(req.Source())
	c.Params.Add("rport", port)
	c.Params.Add("received", host)
	return &c
}

// taggedTo is a copy of to with a new random tag (RFC 3261 19.3: at least
// 32 random bits; these are 64). The address is shared, its parameters
// are not.
func taggedTo(to *sip.ToHeader) *sip.ToHeader {
	c := *to
	c.Params = make(sip.HeaderParams, len(to.Params), len(to.Params)+1)
	copy(c.Params, to.Params)
	c.Params.Add("tag", NewTag())
	return &c
}

// NewTag returns a random 16 hex digit tag.
func NewTag() string {
	var b [8]byte
	var out [16]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// respBufs are the scratch buffers responses are written into.
var respBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledResponse bounds the buffers kept in respBufs.
const maxPooledResponse = 16 << 10

// ResponseBytes is res as it goes on the wire, in one allocation of its
// size: written into a pooled buffer, then copied once (res.String grows
// a builder several times for every response).
func ResponseBytes(res *sip.Response) []byte {
	buf := respBufs.Get().(*bytes.Buffer)
	buf.Reset()
	res.StringWrite(buf)
	b := bytes.Clone(buf.Bytes())
	if buf.Cap() <= maxPooledResponse {
		respBufs.Put(buf)
	}
	return b
}
