// Package sdp parses the SDP bodies of SIP offers and answers (RFC 4566,
// RFC 3264) and builds the PBX's own.
//
// It owns the codec policy: the PBX offers only its configured codecs
// (alaw = PCMA/8000 payload type 8, ulaw = PCMU/8000 payload type 0, in the
// configured order) plus telephone-event/8000 (RFC 4733), and Negotiate
// returns the codecs common to an offer and that list, in the PBX's order,
// so that both legs of a call end up with the same set and RTP can be
// relayed without transcoding.
//
// Parse is lenient where interoperability needs it (unknown lines and
// attributes are ignored, CRLF or LF line ends) and strict where the media
// depends on it (a missing connection address or a malformed m= line is
// an error). Only the first audio stream is used; other media lines are
// answered with port 0 by Answer.
//
// An Origin keeps the o= line's session id stable for a leg and raises its
// version for every new offer or answer with changed content (hold and
// resume re-INVITEs).
package sdp
