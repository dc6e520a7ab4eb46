// Package sipcore owns the SIP listeners of the PBX and the one sipgo user
// agent, server and clients built on them.
//
// It binds every configured listener when constructed (New), so a port that
// is taken is reported, naming the listener id, before the process signals
// readiness. Run serves the bound sockets until its context ends; Close
// releases them.
//
// sipcore knows nothing of tenants, configuration documents, storage or
// HTTP. It offers:
//
//   - an admission hook that sees every datagram (UDP) or every whole
//     message of an accepted connection (TCP) before the SIP parser, so a
//     guard can drop abusive sources; over TCP a refusal closes the
//     connection at that message boundary;
//   - SIP over TCP bounded against hostile peers (tcp.go): accept errors
//     retried, connections capped in total and per source, closed when idle,
//     when a message stays incomplete or exceeds TCPMaxMessage; counted in
//     Server.TCPStats;
//   - handler registration that adds the Server header to every response the
//     handlers send and answers new INVITEs with 503 while draining;
//   - an answer to OPTIONS outside a dialog (200 with Allow and Accept),
//     sent over UDP without a transaction;
//   - REGISTER over UDP handled without a sipgo transaction (udpregister.go):
//     a few workers run its handler, the final answer's bytes are cached
//     5 to 10 s for retransmissions, and a REGISTER the workers or the
//     cache have no room for is answered 503 with Retry-After at once;
//   - an answer to methods nobody handles, logged at debug level: SUBSCRIBE
//     gets 489 Bad Event (no event package is supported), PRACK 420 with
//     Unsupported: 100rel (reliable provisionals are not supported), and
//     anything else (REFER, MESSAGE...) 405 with Allow;
//   - Phrase, the standard reason phrase of every status code;
//   - per-transport clients whose Via and Contact advertise the external host;
//   - bounded state under a flood (udp.go): UDP is read by sipcore's own
//     readers, which answer 505 (SIP version not 2.0), 513 (datagram over
//     UDPMaxMessage) and 503 with Retry-After past the cap on open server
//     transactions (Options.MaxServerTransactions) before anything is kept,
//     and feed sipgo through generations that let it forget the source
//     addresses it learns. Server.Stats exposes the counts.
//
// Caveats:
//
//   - Listeners of transport "tls" and "wss" are refused with an error naming
//     the listener: SIP over TLS and WebSocket is not wired to the stack.
//   - sipgo refuses UDP messages larger than sip.UDPMTUSize-200 bytes. New
//     raises that process-wide variable to UDPMaxMessage so that an INVITE
//     carrying a full SDP and many headers still fits.
//   - User-Agent is added to requests built by this module (see
//     Server.UserAgentHeader). ACK and CANCEL requests that sipgo builds
//     internally carry no User-Agent.
//   - Connections the PBX dials itself (to a phone or a trunk over TCP) are
//     neither framed nor admitted: the PBX chose the peer.
//   - sipgo writes a few messages (TCP reference counting) through its
//     package-level logger, slog.Default; its setter is not safe to call
//     while SIP traffic flows, so the composition root should call
//     sip.SetDefaultLogger before New if it wants them elsewhere.
package sipcore
