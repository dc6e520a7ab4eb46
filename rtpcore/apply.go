package rtpcore

import (
	"net/netip"

	"pbx/rtpcore/sdp"
)

// ApplySDP points the leg at the far end described by d, the far end's
// own offer or answer: the audio address (SetRemote), the a=rtcp port if
// given (SetRTCPRemote), and the telephone-event payload type
// (SetTelephoneEventPT, or SetNoTelephoneEvent). Calling it again with an unchanged description
// keeps the latched addresses.
func (l *Leg) ApplySDP(d *sdp.Description) {
	if d == nil {
		return
	}
	l.SetRemote(d.AudioAddr())
	if d.RTCPPort > 0 && d.Addr.IsValid() {
		l.SetRTCPRemote(netip.AddrPortFrom(d.Addr, uint16(d.RTCPPort)))
	}
	if d.TelephoneEvent != nil {
		l.SetTelephoneEventPT(int(d.TelephoneEvent.PayloadType))
	} else {
		l.SetNoTelephoneEvent()
	}
}
