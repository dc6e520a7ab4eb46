package rtpcore

import "errors"

var (
	// ErrPortsExhausted is returned when every port of the range is in use
	// or in quarantine.
	ErrPortsExhausted = errors.New("rtp port range exhausted")
	// ErrClosed is returned by operations on a closed engine, session or leg.
	ErrClosed = errors.New("media closed")
	// ErrForeignLeg is returned when a leg of another session is passed to
	// Session.Bridge, or a leg is bridged to itself.
	ErrForeignLeg = errors.New("leg not usable in this bridge")
	// ErrInjecting is returned by Leg.Inject while another injection is
	// active on the leg.
	ErrInjecting = errors.New("leg already has an active injection")
	// ErrShortPacket is returned by ParseHeader for a buffer too short to
	// hold the header it announces.
	ErrShortPacket = errors.New("rtp packet too short")
	// ErrNotRTP is returned by ParseHeader when the version is not 2.
	ErrNotRTP = errors.New("not an rtp version 2 packet")
	// ErrBadDTMF is returned by ParseDTMF for a payload that is not a
	// 4-byte RFC 4733 telephone event.
	ErrBadDTMF = errors.New("malformed telephone-event payload")
	// ErrBadWAV is returned for a file that is not a well-formed RIFF/WAVE.
	ErrBadWAV = errors.New("malformed wav file")
	// ErrUnsupportedWAV is returned for a well-formed WAV file in another
	// format than 8 kHz mono 16-bit PCM.
	ErrUnsupportedWAV = errors.New("unsupported wav format (want 8 kHz mono 16-bit PCM)")
)
