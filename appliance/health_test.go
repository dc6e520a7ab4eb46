package appliance

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestHealthProbe answers the probe with a real UDP socket playing the SIP stack,
// then stops answering: Healthy turns false once the last answer is stale.
func TestHealthProbe(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	answer := make(chan bool, 1)
	answer <- true
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			ok := <-answer
			answer <- ok
			if !ok {
				continue
			}
			req := string(buf[:n])
			var callID string
			for _, l := range strings.Split(req, "\r\n") {
				if strings.HasPrefix(l, "Call-ID:") {
					callID = strings.TrimSpace(strings.TrimPrefix(l, "Call-ID:"))
				}
			}
			_, _ = pc.WriteTo([]byte("SIP/2.0 200 OK\r\nCall-ID: "+callID+"\r\nContent-Length: 0\r\n\r\n"), from)
		}
	}()
	target := netip.MustParseAddrPort(pc.LocalAddr().String())
	if err := probeOptions(context.Background(), target); err != nil {
		t.Fatalf("probe of an answering stack: %v", err)
	}
	<-answer
	answer <- false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := probeOptions(ctx, target); err == nil {
		t.Fatal("probe of a silent stack succeeded")
	}

	now := time.Now()
	h := newHealth(target)
	h.now = func() time.Time { return now }
	if !h.Healthy() {
		t.Fatal("a fresh health is unhealthy")
	}
	now = now.Add(probeStale + time.Second)
	if h.Healthy() {
		t.Fatal("healthy with no answer for longer than probeStale")
	}
}
