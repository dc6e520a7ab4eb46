package sipcore

import (
	"fmt"
	"io"
)

// crlfPing is the keepalive RFC 5626 section 3.5.1 defines for connection
// oriented transports: a double CRLF, answered by a single CRLF (sipgo
// answers one arriving on our listeners the same way).
var crlfPing = []byte("\r\n\r\n")

// PingTCP writes a CRLF keepalive on the open TCP connection to addr
// ("ip:port"), so a NAT or firewall in between keeps the phone's connection
// mapped. It fails when no such connection is open.
func (s *Server) PingTCP(addr string) error {
	pool := s.ua.TransportLayer().Pool(TransportTCP)
	if pool == nil {
		return fmt.Errorf("ping %s: %w", addr, ErrNoListener)
	}
	c := pool.Get(addr)
	if c == nil {
		return fmt.Errorf("ping %s: no open connection", addr)
	}
	// Undo Get's reference without TryClose (see ConnectionOpen).
	defer c.Ref(-1)
	w, ok := c.(io.Writer)
	if !ok {
		return fmt.Errorf("ping %s: connection %T cannot write raw bytes", addr, c)
	}
	if _, err := w.Write(crlfPing); err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	return nil
}
