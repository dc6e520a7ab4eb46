package sipcore

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"
)

// Read buffer sizes of a framed connection: it starts at tcpReadChunk,
// grows while one message needs it (up to TCPMaxMessage plus a chunk), and
// goes back to nothing between messages once it grew beyond tcpKeepBuffer,
// so an idle connection holds little memory.
const (
	tcpReadChunk  = 4 << 10
	tcpKeepBuffer = 16 << 10
)

var (
	crlfcrlf = []byte("\r\n\r\n")
	crlfPong = []byte("\r\n")
)

// closeReason says why a framed connection was closed by the PBX.
type closeReason int

const (
	closeNone closeReason = iota
	closeIdle
	closeIncomplete
	closeOversize
	closeMalformed
	closeThrottled
)

func (r closeReason) String() string {
	return [...]string{"", "idle", "incomplete", "oversize", "malformed", "throttled"}[r]
}

// tcpConn is an accepted SIP TCP connection that hands sipgo whole SIP
// messages only. It reads the stream itself and frames it as RFC 3261 18.3
// says: the header section ends at the first blank line (CRLFCRLF) and the
// body is Content-Length bytes, which a stream transport must send. CRLF
// keep-alives between messages (RFC 5626 3.5.1) are consumed here: a
// double-CRLF ping is answered with a CRLF pong, and neither reaches sipgo.
//
// Each complete message goes through the admission hook once; a refused
// message, a message above TCPMaxMessage (known from the header section
// alone when Content-Length says so), and a message without a usable
// Content-Length or a plausible start line close the connection at that message boundary, so sipgo
// never holds a partial message. A connection with nothing received for
// IdleTimeout, or a message incomplete MessageTimeout after its first byte,
// is closed as well. sipgo then sees io.EOF, a clean close.
//
// sipgo reads from one goroutine; Read is not safe for concurrent use.
type tcpConn struct {
	net.Conn
	src    netip.AddrPort
	limits *tcpLimits

	buf     []byte // buf[r:w] is received and not yet handed out
	r, w    int
	scan    int       // bytes after r searched for the blank line
	hdrEnd  int       // length of the header section with its blank line; 0 until found
	length  int       // length of the message at r; 0 until known
	started time.Time // first byte of the message at r; zero between messages
	kaRun   int       // keep-alive bytes since the last pong or message
	out     []byte    // admitted message bytes not yet read by sipgo

	releaseOnce sync.Once
}

func newTCPConn(c net.Conn, src netip.AddrPort, limits *tcpLimits) *tcpConn {
	return &tcpConn{Conn: c, src: src, limits: limits}
}

// Read hands out the next admitted message, in as many reads as p needs.
func (c *tcpConn) Read(p []byte) (int, error) {
	if len(c.out) == 0 {
		msg, err := c.next()
		if err != nil {
			c.release()
			return 0, err
		}
		c.out = msg
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// Write writes p with a deadline of TCPWriteTimeout.
func (c *tcpConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(TCPWriteTimeout))
	return c.Conn.Write(p)
}

// SetReadDeadline does nothing: the connection sets its own read deadlines.
func (c *tcpConn) SetReadDeadline(time.Time) error { return nil }

// Close closes the socket and returns the connection's slot. Closing again
// returns nil: sipgo closes a connection the framing already closed, and
// would log an error as a leak.
func (c *tcpConn) Close() error {
	var err error
	c.releaseOnce.Do(func() {
		c.limits.give(c.src.Addr())
		err = c.Conn.Close()
	})
	return err
}

func (c *tcpConn) release() { _ = c.Close() }

// next returns the next complete, admitted message; an error ends the
// connection.
func (c *tcpConn) next() ([]byte, error) {
	for {
		if c.started.IsZero() {
			c.skipKeepAlives()
			if c.w > c.r {
				c.started = time.Now()
			}
		}
		if c.w > c.r {
			n, why := c.frame()
			if why != closeNone {
				return nil, c.drop(why)
			}
			if n > 0 {
				msg := c.buf[c.r : c.r+n]
				c.r += n
				c.scan, c.hdrEnd, c.length, c.kaRun, c.started = 0, 0, 0, 0, time.Time{}
				if admit := c.limits.admit; admit != nil && !admit(c.src, TransportTCP, msg) {
					return nil, c.drop(closeThrottled)
				}
				return msg, nil
			}
		}
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
}

// skipKeepAlives consumes CR and LF bytes at a message boundary and answers
// a double-CRLF ping with a pong.
func (c *tcpConn) skipKeepAlives() {
	i := c.r
	for i < c.w && (c.buf[i] == '\r' || c.buf[i] == '\n') {
		i++
	}
	if i == c.r {
		return
	}
	c.kaRun += i - c.r
	c.r = i
	if c.kaRun >= len(crlfcrlf) {
		c.kaRun = 0
		_, _ = c.Write(crlfPong)
	}
}

// frame returns the length of the complete message at r, 0 while more bytes
// are needed, or why the connection must close.
func (c *tcpConn) frame() (int, closeReason) {
	data := c.buf[c.r:c.w]
	if c.length == 0 {
		if c.hdrEnd == 0 {
			from := max(c.scan-len(crlfcrlf)+1, 0)
			i := bytes.Index(data[from:], crlfcrlf)
			if i < 0 {
				c.scan = len(data)
				if len(data) > TCPMaxMessage {
					return 0, closeOversize
				}
				return 0, closeNone
			}
			c.hdrEnd = from + i + len(crlfcrlf)
		}
		body, ok := contentLength(data[:c.hdrEnd])
		if !ok || !plausibleStartLine(data[:c.hdrEnd]) {
			return 0, closeMalformed
		}
		if body > TCPMaxMessage-c.hdrEnd {
			return 0, closeOversize
		}
		c.length = c.hdrEnd + body
	}
	if len(data) < c.length {
		return 0, closeNone
	}
	return c.length, closeNone
}

// fill reads more bytes, under the idle deadline between messages and the
// message deadline inside one.
func (c *tcpConn) fill() error {
	if c.r == c.w {
		c.r, c.w = 0, 0
		if cap(c.buf) > tcpKeepBuffer {
			c.buf = nil
		}
	}
	if c.buf == nil {
		c.buf = make([]byte, tcpReadChunk)
	}
	if c.w == len(c.buf) {
		if c.r > 0 {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		}
		if c.w == len(c.buf) {
			nb := make([]byte, min(2*len(c.buf), TCPMaxMessage+tcpReadChunk))
			copy(nb, c.buf[:c.w])
			c.buf = nb
		}
	}
	deadline := time.Now().Add(c.limits.opts.IdleTimeout)
	if !c.started.IsZero() {
		deadline = c.started.Add(c.limits.opts.MessageTimeout)
	}
	_ = c.Conn.SetReadDeadline(deadline)
	n, err := c.Conn.Read(c.buf[c.w:])
	c.w += n
	switch {
	case n > 0 || err == nil:
		return nil // an error comes back on the next read
	case errors.Is(err, os.ErrDeadlineExceeded) && c.started.IsZero():
		return c.drop(closeIdle)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return c.drop(closeIncomplete)
	}
	return err
}

// drop closes the connection for why, counts and logs it, and returns the
// io.EOF sipgo takes for a clean close.
func (c *tcpConn) drop(why closeReason) error {
	l := c.limits
	switch why {
	case closeIdle:
		l.idle.Add(1)
	case closeIncomplete:
		l.incomplete.Add(1)
	case closeOversize:
		l.oversize.Add(1)
	case closeMalformed:
		l.malformed.Add(1)
	case closeThrottled:
		l.throttled.Add(1)
	}
	c.release()
	l.closedLog.add("reason", why.String(), "src", c.src.Addr().String())
	return io.EOF
}

// plausibleStartLine reports whether the header section starts with what
// could be a SIP start line (RFC 3261 7.1, 7.2): a status line "SIP/...",
// or a method token, a space, a URI and a space before "SIP/...". The
// version itself is left to the stack, which answers 505 to one it does
// not support. Anything else (binary noise, an HTTP probe) is closed here,
// before sipgo would log the bytes as a parse error.
func plausibleStartLine(hdr []byte) bool {
	line, _, _ := bytes.Cut(hdr, crlfPong)
	if bytes.HasPrefix(line, []byte("SIP/")) {
		return true
	}
	method, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(method) == 0 {
		return false
	}
	for _, b := range method {
		if !isTokenChar(b) {
			return false
		}
	}
	i := bytes.LastIndexByte(rest, ' ')
	return i > 0 && bytes.HasPrefix(rest[i+1:], []byte("SIP/"))
}

// isTokenChar reports whether b may appear in an RFC 3261 token.
func isTokenChar(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return bytes.IndexByte([]byte("-.!%*_+`'~"), b) >= 0
}

// contentLength reads the Content-Length (or its compact form l) of a header
// section. It fails when the header is missing or not a decimal number, or
// appears twice with different values: RFC 3261 18.3 requires it on a
// stream, and a length two readers could disagree on would desynchronise
// the stream.
func contentLength(hdr []byte) (int, bool) {
	n, found := 0, false
	lines := bytes.Split(hdr, crlfPong)
	for _, line := range lines[1:] { // the start line has no header
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || line[0] == ' ' || line[0] == '\t' {
			continue // blank, folded or not a header line
		}
		name := bytes.TrimRight(line[:colon], " \t")
		if !bytes.EqualFold(name, []byte("content-length")) && !bytes.EqualFold(name, []byte("l")) {
			continue
		}
		v := bytes.Trim(line[colon+1:], " \t")
		if len(v) == 0 || len(v) > 9 {
			return 0, false
		}
		m, err := strconv.Atoi(string(v))
		if err != nil || m < 0 || v[0] == '+' {
			return 0, false
		}
		if found && m != n {
			return 0, false
		}
		n, found = m, true
	}
	return n, found
}
