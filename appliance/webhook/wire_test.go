package webhook

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// TestWireConnRunsArmedAfterTheWrite: an armed wireConn runs its callback
// once, after the write to the socket returned (the peer can read the
// bytes), and not before; flushedBy finds it under HTTP/1.1 over TLS and
// not on a connection it did not dial.
func TestWireConnRunsArmedAfterTheWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			peer <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := wireDialer(nil)(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wc := flushedBy(c)
	if wc == nil {
		t.Fatal("a dialled connection is not watched")
	}
	calls := 0
	wc.arm(func() { calls++ })
	if calls != 0 {
		t.Fatal("armed callback ran before any write")
	}
	if _, err := c.Write([]byte("POST")); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("armed callback ran %d times after the write", calls)
	}
	if _, err := c.Write([]byte(" /")); err != nil || calls != 1 {
		t.Fatalf("a second write ran the callback again (%d, %v)", calls, err)
	}
	p := <-peer
	defer p.Close()
	_ = p.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 6)
	if _, err := io.ReadFull(p, b); err != nil || string(b) != "POST /" {
		t.Fatalf("peer read %q, %v", b, err)
	}
	if flushedBy(tls.Client(c, &tls.Config{InsecureSkipVerify: true})) != wc {
		t.Fatal("HTTP/1.1 over TLS: the flush is not watched")
	}
	if flushedBy(p) != nil {
		t.Fatal("a connection not dialled by wireDialer is watched")
	}
}
