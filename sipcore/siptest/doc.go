// Package siptest provides SIP test phones built on sipgo: real sockets on
// loopback that register with digest authentication, place and answer
// calls, put calls on hold and send and receive RTP. Tests of sipcore and of
// the composition root drive the PBX through them.
//
// A Phone listens on 127.0.0.1 with port 0 (UDP or TCP), registers with
// digest authentication (Register, SendAuth), places calls (Dial) that
// answer the PBX's 407, and answers incoming calls as its Behaviour says
// (answer after a delay, ring forever, reject, with early media). A Call
// exposes its RTP endpoint (Media: send packets, wait for received ones),
// re-INVITEs for hold and resume, INFO, and channels for ringing, answer,
// cancellation and hang-up. Directory is an in-memory registrar.Directory.
//
// Phones send INVITEs with a Route to the PBX, as phones with an outbound
// proxy do, so the CANCEL sipgo builds reaches the PBX without resolving
// the SIP domain.
package siptest
