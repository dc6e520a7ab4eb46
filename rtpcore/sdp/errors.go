package sdp

import "errors"

var (
	// ErrNoCommonCodec is returned by Negotiate when the offer shares no
	// codec with the PBX's list; the B2BUA answers 488.
	ErrNoCommonCodec = errors.New("no common codec")
	// ErrNoAudio is returned by Parse for a body without an audio m= line.
	ErrNoAudio = errors.New("no audio stream in sdp")
	// ErrMalformed is returned by Parse for a body that is not valid SDP.
	ErrMalformed = errors.New("malformed sdp")
	// ErrUnknownCodec is returned by CodecByName for a codec the PBX does
	// not support.
	ErrUnknownCodec = errors.New("unknown codec")
)
