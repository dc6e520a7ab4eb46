// Package mobile makes native apps phones of their extension through a
// LiveKit-compatible room service: it talks to the room service (rooms,
// join tokens, SIP participants), holds the single-use grants that
// authorise the bridge's INVITEs for calls an app places, and follows each
// mobile offer (the extra fork leg toward the bridge) to its end.
//
// It does not own device sessions, the device HTTP routes or webhook
// delivery: it reaches them through the Devices and Webhooks interfaces,
// and the routes reach it through Calls.
//
// Caveats: grants live in memory only, so a restart invalidates them; no
// room service call is ever made while a SIP lock is held (the router calls
// in on the INVITE's goroutine, the offer's end is handled on its own).
package mobile
