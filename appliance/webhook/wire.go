package webhook

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptrace"
	"sync"
)

// HTTP/1.1's WroteRequest trace fires once the request is in the
// connection's write buffer, before the transport flushes it to the
// socket; an urgent delivery (mobile.ringing, which must be on the wire
// before the mobile leg's INVITE leaves) is marked written only when that
// flush's write has returned. The dispatcher's own transport dials
// wireConns for this. HTTP/2 flushes before WroteRequest, so there (and on
// connections a caller-supplied client dialled) WroteRequest marks at
// once.

// wireConn is a dialled connection that runs a callback after the next
// write to the socket returns.
type wireConn struct {
	net.Conn
	mu    sync.Mutex
	armed func()
}

func (c *wireConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	f := c.armed
	c.armed = nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return n, err
}

// arm makes the next write run f once it returned.
func (c *wireConn) arm(f func()) {
	c.mu.Lock()
	c.armed = f
	c.mu.Unlock()
}

// wireDialer wraps dial so that every connection is a wireConn.
func wireDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c}, nil
	}
}

// flushedBy is the wireConn whose next write flushes an HTTP/1.1 request
// sent on conn (as GotConn reports it), or nil when WroteRequest already
// means on the wire (HTTP/2, or a connection not dialled by wireDialer).
func flushedBy(conn net.Conn) *wireConn {
	if tc, ok := conn.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return nil
		}
		conn = tc.NetConn()
	}
	w, _ := conn.(*wireConn)
	return w
}

// onTheWire is the client trace that calls mark once the request has been
// written to the socket (or the attempt ends first: the caller also calls
// mark then).
func onTheWire(mark func()) *httptrace.ClientTrace {
	var conn net.Conn // set by GotConn, which happens before the request is written
	return &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn },
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if w := flushedBy(conn); w != nil && i.Err == nil {
				w.arm(mark)
				return
			}
			mark()
		},
	}
}
