// Package rtpcore is the PBX's media plane: it anchors every call's RTP.
//
// It owns:
//
//   - a PortPool handing out even UDP ports from a configured range (with
//     the odd port above each for RTCP), binding the sockets itself and
//     quarantining released ports for a few seconds so that late packets of
//     an old call never reach a new one;
//   - an Engine holding the pool and the addresses (bind and advertised);
//   - a Session per call with any number of Legs, one per SIP leg. A leg
//     has its own socket, a remote address taken from SDP, symmetric
//     latching (the far end's real source address wins; once latched,
//     packets from other sources are dropped, and a new source takes over
//     only after the latched one has fallen silent, as in a NAT
//     rebinding), and counters (packets and bytes in and out, loss from
//     sequence gaps, RFC 3550 interarrival jitter, last packet time);
//   - Session.Bridge, which relays RTP (and RTCP) between two legs without
//     touching the payload, the sequence numbers or the timestamps (only a
//     telephone-event payload type is mapped when the two legs negotiated
//     different ones, see Leg.SetTelephoneEventPT);
//   - Taps (synchronous observers of relayed and injected packets, for
//     recording and voicemail) and Injections (a player replacing the
//     relayed audio toward one leg with its own SSRC, sequence and
//     timestamp, for music on hold and prompts), plus a Player pacing a WAV
//     file as 20 ms G.711 packets;
//   - media timeout detection (Session.Idle and SessionOptions.OnTimeout);
//   - G.711 A-law and µ-law, RFC 4733 telephone events with a DTMFDetector
//     (and DTMFTap, which runs one on a leg), a WAV reader (8 kHz mono
//     16-bit PCM) and a stereo WAV writer.
//
// SDP parsing, codec negotiation and the PBX's offers and answers live in
// the subpackage rtpcore/sdp; Leg.ApplySDP points a leg at the far end a
// parsed description names.
//
// It does not know SIP, tenants, configuration documents or HTTP; the B2BUA
// drives it.
//
// Caveats:
//
//   - On Linux the relay is a few worker goroutines (one for every two
//     Ps, two where there are two), each serving the sockets of many legs from its own epoll set
//     and reading into one reused buffer; the sockets are its own,
//     non-blocking and outside the Go runtime's poller. Elsewhere it is
//     one goroutine per socket. Taps run on the relay's goroutine, so on
//     Linux a slow Tap delays every leg of its worker: a Tap must return
//     quickly and must not keep the Packet or its slices after it returns.
//     A slow consumer should use NewQueueTap, which copies into a bounded
//     queue and counts what it drops.
//   - A relayed packet that finds the outgoing socket's send buffer full
//     is dropped and counted as a send error rather than stalling the
//     relay.
//   - No transcoding: both legs of a bridge must have negotiated the same
//     codec set, which rtpcore/sdp.Negotiate and the B2BUA guarantee.
//   - RTCP is relayed unchanged between bridged legs on the odd port above
//     each RTP port (the pool binds both), so offers may omit a=rtcp or
//     name port+1. Options.NoRTCP turns this off. RTCP does not count
//     toward the media timeout.
//   - Sockets are IPv4 unless Options.BindIP is an IPv6 address.
//   - Plain RTP only; SRTP is not implemented.
package rtpcore
