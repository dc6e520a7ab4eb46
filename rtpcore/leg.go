package rtpcore

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// maxPacket is the receive buffer size; RTP over UDP stays below the MTU
// but a jumbo datagram must not be truncated silently.
const maxPacket = 2048

// Leg is one SIP leg's RTP endpoint: a local socket, the far end's address
// and counters. Packets arriving on it are relayed to its bridged peer, if
// any, and shown to its taps.
type Leg struct {
	// The fields every relayed packet touches, receive side and send side
	// (the peer's are the same fields of the peer), come first and
	// together, so that a packet touches three or four cache lines of
	// each leg rather than lines spread over a struct of many: with 2,000
	// legs and the kernel's work in between, each of them is a miss. The
	// first 64 bytes are what the peer's send reads too; the relay worker
	// touches them ahead (see worker.warm).
	mu         sync.Mutex   // guards the latching and receive-side state below
	lastPacket atomic.Int64 // engine mono time of the last packet relayed from the far end; 0: none
	peer       atomic.Pointer[Leg]
	target     atomic.Pointer[dest]        // where packets to the far end go
	taps       atomic.Pointer[[]*tapEntry] // the taps shown every packet received (In)
	inj        atomic.Pointer[Injection]
	conn       *sock // RTP
	clockRate  atomic.Uint32
	tePT       atomic.Int32 // telephone-event payload type of this leg's SDP; -1 unknown, teNone none

	// Outbound counters are written by the peer's reader and by injections.
	pktsOut  atomic.Uint64
	bytesOut atomic.Uint64
	outTaps  atomic.Pointer[[]*tapEntry] // the taps that also see packets sent (Out)
	// eventTaps are the taps shown only telephone events received (see
	// AddEventTap).
	eventTaps atomic.Pointer[[]*tapEntry]

	latched   bool
	candCount int
	lastLatch int64 // engine mono time of the last packet from the latched source
	malformed uint64
	strays    uint64 // packets from other sources while latched, not relayed
	in        recvStats

	sess  *Session
	name  string
	local netip.AddrPort

	replaced       atomic.Uint64 // relayed packets dropped while an injection was active
	injected       atomic.Uint64
	unsent         atomic.Uint64 // packets for this leg with no address to go to
	sendErrors     atomic.Uint64
	lastSendErrLog atomic.Int64

	// Latching state off the fast path, guarded by mu.
	sdpRemote netip.AddrPort
	cand      netip.AddrPort
	candSince int64 // engine mono time of the first packet of the candidate's current run

	// injection sequence state, guarded by injMu.
	injMu   sync.Mutex
	ssrc    uint32
	seq     uint16
	ts      uint32
	tsWall  time.Time
	started bool

	scratch Packet      // reused for taps by the leg's reader
	allTaps []*tapEntry // every tap attached, guarded by tapsMu

	// RTCP on the odd port; rtcp is nil when the engine relays no RTCP.
	rtcp         *sock
	rtcpTarget   atomic.Pointer[netip.AddrPort]
	rtcpIn       atomic.Uint64
	rtcpOut      atomic.Uint64
	rtcpStrays   atomic.Uint64
	rtcpLatched  bool // guarded by mu
	rtcpExplicit bool // guarded by mu: set by SetRTCPRemote

	closing   atomic.Bool
	closeOnce sync.Once

	ko offloadState // see Options.KernelForwarding
}

// dest is a leg's target: the far end's address and its kernel form for
// the leg's socket, built when the target changes, not per packet.
type dest struct {
	ap  netip.AddrPort
	raw rawDest
}

// newDest builds the target ap for l's socket.
func (l *Leg) newDest(ap netip.AddrPort) *dest {
	return &dest{ap: ap, raw: l.conn.rawDest(ap)}
}

func newLeg(s *Session, name string, conn, rtcp *sock) *Leg {
	l := &Leg{
		sess:  s,
		name:  name,
		conn:  conn,
		rtcp:  rtcp,
		local: conn.local,
		ssrc:  randUint32(),
		seq:   uint16(randUint32()),
		ts:    randUint32(),
	}
	l.clockRate.Store(DefaultClockRate)
	l.tePT.Store(-1)
	return l
}

// Name returns the leg's name.
func (l *Leg) Name() string { return l.name }

// Session returns the session the leg belongs to.
func (l *Leg) Session() *Session { return l.sess }

// Port is the local RTP port, to be written into this leg's SDP.
func (l *Leg) Port() int { return int(l.local.Port()) }

// LocalAddr is the socket's bound address.
func (l *Leg) LocalAddr() netip.AddrPort { return l.local }

// AdvertisedAddr is the engine's advertised address with this leg's port.
func (l *Leg) AdvertisedAddr() netip.AddrPort {
	return netip.AddrPortFrom(l.sess.e.advertise, l.local.Port())
}

// SetClockRate sets the RTP clock rate used for jitter and injection
// timestamps; the default is 8000.
func (l *Leg) SetClockRate(hz uint32) {
	if hz > 0 && l.clockRate.Swap(hz) != hz {
		l.resetOffload()
	}
}

// SetTelephoneEventPT records the telephone-event payload type negotiated
// on this leg (negative: none or unknown). When both bridged legs have one
// and they differ (a caller offering 96 while the callee was offered
// 101), relayed telephone-event packets get the receiving leg's type;
// nothing else in the packet changes.
func (l *Leg) SetTelephoneEventPT(pt int) {
	if pt < 0 || pt > 127 {
		pt = -1
	}
	if l.tePT.Swap(int32(pt)) != int32(pt) {
		l.resetOffload()
	}
}

// teNone marks a leg whose SDP has no telephone-event.
const teNone = -2

// SetNoTelephoneEvent records that the leg's SDP has no telephone-event:
// telephone-event packets are not relayed toward it.
func (l *Leg) SetNoTelephoneEvent() {
	if l.tePT.Swap(teNone) != teNone {
		l.resetOffload()
	}
}

// TelephoneEventPT returns the leg's telephone-event payload type, or -1
// (none, or unknown).
func (l *Leg) TelephoneEventPT() int { return int(max(l.tePT.Load(), -1)) }

// SetRemote sets the far end's address from its SDP (c= and m= port). A
// changed address starts latching afresh; setting the same address again
// (a session refresh) keeps the latched one. An unspecified address or
// port 0 (old-style hold) stops sending until packets arrive.
func (l *Leg) SetRemote(ap netip.AddrPort) {
	if l.setRemote(ap) {
		l.resetOffload()
	}
}

// setRemote is SetRemote but for the kernel forwarding; it reports
// whether the address changed.
func (l *Leg) setRemote(ap netip.AddrPort) bool {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	l.mu.Lock()
	defer l.mu.Unlock()
	if ap == l.sdpRemote && l.target.Load() != nil {
		return false
	}
	l.sdpRemote = ap
	l.latched = false
	l.candCount = 0
	l.rtcpLatched = false
	l.rtcpExplicit = false
	if ap.Addr().IsUnspecified() || ap.Port() == 0 || !ap.IsValid() {
		l.target.Store(nil)
		l.rtcpTarget.Store(nil)
		return true
	}
	l.target.Store(l.newDest(ap))
	if ap.Port() < 65535 {
		rt := netip.AddrPortFrom(ap.Addr(), ap.Port()+1)
		l.rtcpTarget.Store(&rt)
	}
	return true
}

// Remote is where packets for the far end are sent now: the latched
// source address, else the SDP address. It is invalid when unknown.
func (l *Leg) Remote() netip.AddrPort {
	if t := l.target.Load(); t != nil {
		return t.ap
	}
	return netip.AddrPort{}
}

// Latched reports whether the leg has received packets from its current
// remote address.
func (l *Leg) Latched() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latched
}

// Peer returns the leg this one is bridged to, or nil.
func (l *Leg) Peer() *Leg { return l.peer.Load() }

// Bridge relays RTP both ways between a and b, which may belong to
// different sessions of the same engine (a transfer). Each leg's previous
// partner, if any, is unbridged first. Payloads, sequence numbers,
// timestamps and SSRCs pass through unchanged; only a telephone-event
// payload type is mapped (see SetTelephoneEventPT).
func Bridge(a, b *Leg) error {
	if a == nil || b == nil || a == b || a.sess.e != b.sess.e {
		return ErrForeignLeg
	}
	if a.isClosed() || b.isClosed() {
		return ErrClosed
	}
	a.Unbridge()
	b.Unbridge()
	a.peer.Store(b)
	b.peer.Store(a)
	return nil
}

// Unbridge stops relaying between l and its peer.
func (l *Leg) Unbridge() {
	p := l.peer.Swap(nil)
	if p != nil {
		p.peer.CompareAndSwap(l, nil)
	}
	// After the swap: a direction moving in meanwhile sees the bridge
	// gone, one that moved in before is taken back here.
	l.resetOffloadWith(p)
}

func (l *Leg) isClosed() bool { return l.closing.Load() }

// Close unbridges the leg, stops its reader and releases its port into
// quarantine. It is idempotent.
func (l *Leg) Close() error {
	l.closeOnce.Do(func() {
		l.closing.Store(true)
		l.Unbridge()
		if inj := l.inj.Load(); inj != nil {
			_ = inj.Close()
		}
		l.stopIO()
		l.sess.e.retire(l)
	})
	return nil
}

// handle processes one received datagram. On Linux a relay worker calls
// handleAt within a batch, which a closing socket waits for; handle is for
// the other platforms' readers and for tests that close no leg meanwhile.
func (l *Leg) handle(pkt []byte, src netip.AddrPort, now time.Time) {
	l.handleAt(pkt, src, now, l.sess.e.mono(now))
}

// handleAt is handle with now's engine mono time, which a relay worker
// takes once for a batch.
func (l *Leg) handleAt(pkt []byte, src netip.AddrPort, now time.Time, mono int64) {
	h, err := ParseHeader(pkt)
	isRTCP := err == nil && h.PayloadType >= 72 && h.PayloadType <= 76 // RTCP multiplexed on the RTP port
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())

	l.mu.Lock()
	if err != nil {
		l.malformed++
		l.mu.Unlock()
		return
	}
	before := l.target.Load()
	if !l.latch(src, mono) {
		l.strays++
		l.mu.Unlock()
		return
	}
	moved := l.target.Load() != before
	from := l.tePT.Load()
	media := !isRTCP && (from < 0 || int32(h.PayloadType) != from)
	if media && !moved && l.offloaded() {
		// The kernel turned this one away, or it was queued before the
		// direction moved in: fold the kernel's part of the stream in
		// before counting it.
		l.mu.Unlock()
		l.takeBack()
		l.mu.Lock()
	}
	if !isRTCP {
		l.in.update(&h, len(pkt), mono, l.clockRate.Load())
	}
	l.mu.Unlock()
	l.lastPacket.Store(mono)
	if moved && before != nil {
		l.resetOffload() // the far end moved: both directions' rules are stale
	}

	if !isRTCP {
		l.showIn(&h, pkt, now, from)
	}

	peer := l.peer.Load()
	if peer == nil {
		return
	}
	if peer.inj.Load() != nil {
		peer.replaced.Add(1)
		return
	}
	if to := peer.tePT.Load(); from >= 0 && int32(h.PayloadType) == from {
		if to == teNone {
			// The peer's far end did not negotiate telephone-event: the
			// payload type means nothing there (the signalling layer
			// carries the digit another way, SIP INFO).
			return
		}
		if from != to && to >= 0 {
			pkt[1] = pkt[1]&0x80 | byte(to)
			h.PayloadType = uint8(to)
		}
	}
	if !peer.send(pkt, true) {
		return
	}
	if media {
		l.relayedMedia(peer)
	}
	if taps := peer.outTaps.Load(); taps != nil && !isRTCP {
		p := &l.scratch
		p.setTapped(peer, Out, &h, pkt, now)
		for _, t := range *taps {
			t.TapRTP(p)
		}
	}
}

// latch applies symmetric RTP; it is called with l.mu held for every
// valid packet and reports whether the packet comes from the far end (and
// is to be relayed). The first packets latch the leg to their source,
// whatever the SDP said. Once latched, packets from elsewhere are dropped;
// a new source takes over only when it has sent RelatchPackets packets
// over at least RelatchSilence with nothing from the latched source in
// between (a NAT rebinding). Both times (engine mono times) are taken when
// packets are processed, so a stalled relay working through a backlog does
// not mistake a burst of strangers for a persistent source.
func (l *Leg) latch(src netip.AddrPort, now int64) bool {
	t := l.target.Load()
	switch {
	case t != nil && t.ap == src:
		l.latched = true
		l.lastLatch = now
		l.candCount = 0
		return true
	case !l.latched:
		l.target.Store(l.newDest(src))
		l.latched = true
		l.lastLatch = now
		l.candCount = 0
		return true
	}
	if src == l.cand && l.candCount > 0 {
		l.candCount++
	} else {
		l.cand = src
		l.candCount = 1
		l.candSince = now
	}
	q := int64(l.sess.e.relatchQ)
	if l.candCount >= l.sess.e.relatch && now-l.candSince >= q && now-l.lastLatch >= q {
		l.target.Store(l.newDest(src))
		l.lastLatch = now
		l.candCount = 0
		l.sess.log.Info("rtp source changed", "leg", l.name, "remote", src.String())
		return true
	}
	return false
}

// send writes pkt to the far end and counts it; inBatch: from a relay
// worker's batch (see sock.sendInBatch).
func (l *Leg) send(pkt []byte, inBatch bool) bool {
	t := l.target.Load()
	if t == nil {
		l.unsent.Add(1)
		return false
	}
	var err error
	if inBatch {
		err = l.conn.sendInBatch(pkt, &t.raw)
	} else {
		err = l.conn.sendRaw(pkt, &t.raw)
	}
	if err != nil {
		l.sendErrors.Add(1)
		now := time.Now().Unix()
		if last := l.lastSendErrLog.Load(); now-last >= 10 && l.lastSendErrLog.CompareAndSwap(last, now) {
			l.sess.log.Warn("rtp send", "leg", l.name, "remote", t.ap.String(), "err", err)
		}
		return false
	}
	l.pktsOut.Add(1)
	l.bytesOut.Add(uint64(len(pkt)))
	return true
}

// LegStats are a leg's counters. Jitter is the RFC 3550 interarrival
// jitter of the packets received from the far end.
type LegStats struct {
	Name        string
	LocalPort   int
	Remote      netip.AddrPort
	Latched     bool
	Bridged     bool
	PacketsIn   uint64
	BytesIn     uint64
	PacketsOut  uint64
	BytesOut    uint64
	PacketsLost int64
	Jitter      time.Duration
	LastPacket  time.Time // zero until the first packet arrives
	Malformed   uint64    // datagrams that were not RTP
	Strays      uint64    // packets from other sources than the latched one, dropped
	Replaced    uint64    // relayed packets dropped in favour of an injection
	Injected    uint64    // packets sent by injections
	Unsent      uint64    // packets with no remote address to go to
	SendErrors  uint64
	RTCPRemote  netip.AddrPort
	RTCPIn      uint64 // RTCP packets received from the far end
	RTCPOut     uint64 // RTCP packets relayed to the far end
	RTCPDropped uint64 // RTCP datagrams malformed or from strangers
}

// Stats returns the leg's counters.
func (l *Leg) Stats() LegStats {
	st := LegStats{
		Name:        l.name,
		LocalPort:   l.Port(),
		Remote:      l.Remote(),
		Bridged:     l.peer.Load() != nil,
		PacketsOut:  l.pktsOut.Load(),
		BytesOut:    l.bytesOut.Load(),
		Replaced:    l.replaced.Load(),
		Injected:    l.injected.Load(),
		Unsent:      l.unsent.Load(),
		SendErrors:  l.sendErrors.Load(),
		RTCPRemote:  l.RTCPRemote(),
		RTCPIn:      l.rtcpIn.Load(),
		RTCPOut:     l.rtcpOut.Load(),
		RTCPDropped: l.rtcpStrays.Load(),
	}
	l.mu.Lock()
	st.Latched = l.latched
	st.PacketsIn = l.in.packets
	st.BytesIn = l.in.bytes
	st.PacketsLost = l.in.lost()
	st.Jitter = l.in.jitterDuration(l.clockRate.Load())
	st.Malformed = l.malformed
	st.Strays = l.strays
	in := l.in
	l.mu.Unlock()
	if m := l.lastPacket.Load(); m != 0 {
		st.LastPacket = l.sess.e.epoch.Add(time.Duration(m))
	}
	l.addKernel(&st, in)
	return st
}
