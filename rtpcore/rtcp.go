package rtpcore

import "net/netip"

// RTCP travels on the odd port above each leg's RTP port and is relayed
// unchanged between bridged legs; see Options.NoRTCP.

// SetRTCPRemote sets the far end's RTCP address from an a=rtcp attribute;
// without it, SetRemote's port+1 is used. Call it after SetRemote.
func (l *Leg) SetRTCPRemote(ap netip.AddrPort) {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rtcpExplicit {
		if t := l.rtcpTarget.Load(); t != nil && *t == ap {
			return
		}
	}
	l.rtcpExplicit = true
	l.rtcpLatched = false
	if !ap.IsValid() || ap.Port() == 0 || ap.Addr().IsUnspecified() {
		l.rtcpTarget.Store(nil)
		return
	}
	l.rtcpTarget.Store(&ap)
}

// RTCPRemote is where RTCP for the far end is sent now; invalid when
// unknown or when the engine relays no RTCP.
func (l *Leg) RTCPRemote() netip.AddrPort {
	if l.rtcp == nil {
		return netip.AddrPort{}
	}
	if t := l.rtcpTarget.Load(); t != nil {
		return *t
	}
	return netip.AddrPort{}
}

// validRTCP checks the first header of a compound RTCP packet: version 2
// and a packet type in the RTCP range (RFC 5761 section 4).
func validRTCP(b []byte) bool {
	return len(b) >= 8 && b[0]>>6 == 2 && b[1] >= 192 && b[1] <= 223
}

// handleRTCP relays one RTCP datagram, unchanged, to the peer's far end.
// The RTCP source latches like RTP: the first packets win; later, a source
// on the host the RTP is latched to takes over; others are dropped.
func (l *Leg) handleRTCP(pkt []byte, src netip.AddrPort) {
	if !validRTCP(pkt) {
		l.rtcpStrays.Add(1)
		return
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	l.mu.Lock()
	ok := false
	t := l.rtcpTarget.Load()
	switch {
	case t != nil && *t == src:
		ok = true
	case !l.rtcpLatched:
		ok = true
	default:
		rt := l.target.Load()
		ok = rt != nil && rt.ap.Addr() == src.Addr()
	}
	if ok {
		l.rtcpLatched = true
		if t == nil || *t != src {
			s := src
			l.rtcpTarget.Store(&s)
		}
	}
	l.mu.Unlock()
	if !ok {
		l.rtcpStrays.Add(1)
		return
	}
	l.rtcpIn.Add(1)
	peer := l.peer.Load()
	if peer == nil || peer.rtcp == nil {
		return
	}
	pt := peer.rtcpTarget.Load()
	if pt == nil {
		return
	}
	if err := peer.rtcp.sendTo(pkt, *pt); err == nil {
		peer.rtcpOut.Add(1)
	}
}
