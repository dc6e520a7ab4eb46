package b2bua

import (
	"context"
	"errors"

	"pbx/sipcore/calls"
)

// A local application is a call the PBX answers itself: voicemail deposit
// and retrieval today, IVR and queues later. The Router (or a Target's
// Next) returns a Target whose App is set; the Manager then answers the
// caller with 200 and the PBX's own SDP (one rtpcore leg, negotiated as for
// any call), runs App.Run on a goroutine of its own with a Channel over that
// leg, and hangs up (BYE) when Run returns unless the caller hung up first.

// ErrHungUp is returned by Channel.Play when the call ended while playing.
var ErrHungUp = errors.New("b2bua: the caller hung up")

// App is a local application run on an answered call.
type App interface {
	// Run drives the call until it returns (the PBX then hangs up) or the
	// caller hangs up (ctx is cancelled, Channel.Done is closed). Cause is
	// the call record's cause for a call that Run ended itself (empty:
	// answered).
	Run(ctx context.Context, ch Channel) (cause calls.Cause)
}

// AppFunc adapts a function to App.
type AppFunc func(ctx context.Context, ch Channel) calls.Cause

// Run calls f.
func (f AppFunc) Run(ctx context.Context, ch Channel) calls.Cause { return f(ctx, ch) }

// Channel is a local application's view of its call: 8 kHz mono 16-bit
// linear PCM in and out (G.711 coded and decoded by the Manager), and the
// caller's DTMF.
type Channel interface {
	// Call is a snapshot of the call (tenant, caller, extension, ids).
	Call() CallInfo
	// Play sends pcm to the caller in real time, 20 ms per packet, and
	// returns nil once all of it was sent, ctx.Err() when ctx ended first,
	// or ErrHungUp. Plays do not overlap: a second Play waits for the first.
	Play(ctx context.Context, pcm []int16) error
	// Digits delivers the caller's DTMF, one value per key press ('0'-'9',
	// '*', '#', 'A'-'D'), from RFC 4733 events and SIP INFO alike. It is
	// buffered (at least 32 digits); digits beyond that are dropped.
	Digits() <-chan rune
	// Listen delivers the caller's audio from now on, decoded, one 160-sample
	// frame per 20 ms of wall-clock time: a lost or missing packet is a frame
	// of silence, so the frames are a time line. The relay never blocks on
	// it; frames a slow reader leaves behind beyond 2 seconds are dropped.
	// stop ends the delivery and closes the channel.
	Listen() (frames <-chan []int16, stop func())
	// HideDigits keeps the caller's digits from now on out of the call
	// record (PIN entry: the voicemail_check step's digits are never kept).
	HideDigits()
	// Done is closed when the call has ended.
	Done() <-chan struct{}
}

// Failure says why a Target's legs did not answer, for Target.Next.
type Failure struct {
	Cause  calls.Cause // calls.CauseBusy, calls.CauseNoAnswer, calls.CauseFailed (no leg, every leg unreachable), ...
	Status int         // the SIP status the caller would have got
}
