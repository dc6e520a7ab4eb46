package siptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"

	"github.com/pion/rtp"
)

// Media is a phone's RTP socket for one call.
type Media struct {
	conn *net.UDPConn
	pt   uint8
	ssrc uint32

	mu       sync.Mutex
	remote   netip.AddrPort
	seq      uint16
	ts       uint32
	received []rtp.Packet
	notify   chan struct{}
}

func newMedia(pt uint8) (*Media, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("rtp socket: %w", err)
	}
	m := &Media{conn: c, pt: pt, ssrc: rand.Uint32(), seq: uint16(rand.Uint32()), ts: rand.Uint32(), notify: make(chan struct{}, 1)}
	go m.read()
	return m, nil
}

func (m *Media) read() {
	buf := make([]byte, 1500)
	for {
		n, _, err := m.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		var p rtp.Packet
		if err := p.Unmarshal(append([]byte(nil), buf[:n]...)); err != nil {
			continue
		}
		m.mu.Lock()
		m.received = append(m.received, p)
		m.mu.Unlock()
		select {
		case m.notify <- struct{}{}:
		default:
		}
	}
}

// Close closes the socket.
func (m *Media) Close() error { return m.conn.Close() }

// Port is the local RTP port.
func (m *Media) Port() int { return m.conn.LocalAddr().(*net.UDPAddr).Port }

// PayloadType is the codec the phone sends.
func (m *Media) PayloadType() uint8 { return m.pt }

func (m *Media) setRemote(ap netip.AddrPort) {
	m.mu.Lock()
	m.remote = ap
	m.mu.Unlock()
}

// Remote is where the phone sends RTP (from the far end's SDP).
func (m *Media) Remote() netip.AddrPort {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.remote
}

// Send sends one RTP packet carrying payload and returns its sequence
// number.
func (m *Media) Send(payload []byte) (uint16, error) {
	return m.SendPT(m.pt, payload)
}

// SendPT sends one RTP packet of payload type pt (telephone-event, say).
func (m *Media) SendPT(pt uint8, payload []byte) (uint16, error) {
	m.mu.Lock()
	m.seq++
	m.ts += 160
	p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: pt, SequenceNumber: m.seq, Timestamp: m.ts, SSRC: m.ssrc}, Payload: payload}
	remote := m.remote
	m.mu.Unlock()
	b, err := p.Marshal()
	if err != nil {
		return 0, err
	}
	if !remote.IsValid() {
		return 0, fmt.Errorf("no remote rtp address")
	}
	_, err = m.conn.WriteToUDPAddrPort(b, remote)
	return p.SequenceNumber, err
}

// SendEvent sends the packets of one RFC 4733 event: payloads share one
// timestamp, the first carries the marker bit.
func (m *Media) SendEvent(pt uint8, payloads ...[]byte) error {
	m.mu.Lock()
	m.ts += 160
	ts, remote := m.ts, m.remote
	var pkts [][]byte
	for i, pl := range payloads {
		m.seq++
		p := rtp.Packet{Header: rtp.Header{Version: 2, Marker: i == 0, PayloadType: pt, SequenceNumber: m.seq, Timestamp: ts, SSRC: m.ssrc}, Payload: pl}
		b, err := p.Marshal()
		if err != nil {
			m.mu.Unlock()
			return err
		}
		pkts = append(pkts, b)
	}
	m.mu.Unlock()
	if !remote.IsValid() {
		return fmt.Errorf("no remote rtp address")
	}
	for _, b := range pkts {
		if _, err := m.conn.WriteToUDPAddrPort(b, remote); err != nil {
			return err
		}
	}
	return nil
}

// Received returns a copy of the packets received so far.
func (m *Media) Received() []rtp.Packet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]rtp.Packet(nil), m.received...)
}

// WaitReceived waits until at least n packets arrived or ctx ends.
func (m *Media) WaitReceived(ctx context.Context, n int) ([]rtp.Packet, error) {
	for {
		got := m.Received()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-m.notify:
		case <-ctx.Done():
			return got, fmt.Errorf("received %d of %d rtp packets: %w", len(got), n, ctx.Err())
		}
	}
}
