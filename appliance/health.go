package appliance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// Health probing: the appliance asks its own SIP stack for OPTIONS over loopback (or
// the listener's address) at a fixed period. The systemd watchdog is fed only while
// the last answer is recent, so a wedged SIP stack gets the service restarted.
const (
	probeEvery   = 10 * time.Second
	probeTimeout = 3 * time.Second
	probeStale   = 3 * probeEvery
)

type health struct {
	target netip.AddrPort // a UDP listener of ours; invalid means no probe
	last   atomic.Int64   // unix nanoseconds of the last good answer
	now    func() time.Time
}

func newHealth(udp netip.AddrPort) *health {
	h := &health{target: udp, now: time.Now}
	if udp.IsValid() && udp.Addr().IsUnspecified() {
		h.target = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), udp.Port())
		if udp.Addr().Is6() {
			h.target = netip.AddrPortFrom(netip.IPv6Loopback(), udp.Port())
		}
	}
	h.last.Store(h.now().UnixNano())
	return h
}

// Healthy reports whether the SIP stack answered a probe recently. Without a UDP
// listener to probe it reports true.
func (h *health) Healthy() bool {
	if !h.target.IsValid() {
		return true
	}
	return h.now().Sub(time.Unix(0, h.last.Load())) < probeStale
}

// Run probes until ctx ends.
func (h *health) Run(ctx context.Context) error {
	if !h.target.IsValid() {
		return nil
	}
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		if err := probeOptions(ctx, h.target); err == nil {
			h.last.Store(h.now().UnixNano())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// probeOptions sends one OPTIONS over UDP and waits for a 200.
func probeOptions(ctx context.Context, to netip.AddrPort) error {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := d.DialContext(ctx, "udp", to.String())
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:])
	local := c.LocalAddr().String()
	msg := fmt.Sprintf("OPTIONS sip:%s SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK-health-%s;rport\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:health@%s>;tag=%s\r\n"+
		"To: <sip:%s>\r\n"+
		"Call-ID: health-%s\r\n"+
		"CSeq: 1 OPTIONS\r\n"+
		"Content-Length: 0\r\n\r\n", to, local, id, local, id, to, id)
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(buf[:n], []byte("SIP/2.0 200")) && bytes.Contains(buf[:n], []byte("health-"+id)) {
			return nil
		}
	}
}
