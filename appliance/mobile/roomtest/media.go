package roomtest

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"

	"pbx/sipcore/siptest"
)

// media is the bridge's side of one call's audio: a real UDP socket that
// sends PCMU silence every 20 ms to the far end named by its SDP and counts
// what it receives, as a participant's audio would flow.
type media struct {
	conn     *net.UDPConn
	received atomic.Int64
}

func newMedia(host string) (*media, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(host)})
	if err != nil {
		return nil, err
	}
	m := &media{conn: c}
	go m.read()
	return m, nil
}

func (m *media) port() int { return m.conn.LocalAddr().(*net.UDPAddr).Port }

// sdp is the bridge's offer or answer: PCMU, PCMA and telephone-event.
func (m *media) sdp() []byte { return siptest.BuildSDPEvent(m.port(), []uint8{0, 8}, "sendrecv", 101) }

func (m *media) read() {
	buf := make([]byte, 1500)
	for {
		if _, err := m.conn.Read(buf); err != nil {
			return
		}
		m.received.Add(1)
	}
}

// send streams silence to the address in the far end's SDP until ctx
// ends; a body without an address sends nothing.
func (m *media) send(ctx context.Context, far []byte) {
	s, err := siptest.ParseSDP(far)
	if err != nil || !s.Addr.IsValid() {
		return
	}
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.Addr.Addr().Unmap(), s.Addr.Port()))
	pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 0, SSRC: 0x5a5a0001}, Payload: make([]byte, 160)}
	for i := range pkt.Payload {
		pkt.Payload[i] = 0xff // PCMU silence
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b, _ := pkt.Marshal()
		_, _ = m.conn.WriteToUDP(b, dst)
		pkt.SequenceNumber++
		pkt.Timestamp += 160
	}
}

func (m *media) close() { _ = m.conn.Close() }
