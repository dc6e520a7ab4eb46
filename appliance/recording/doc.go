// Package recording records calls: the policy that says which calls are
// recorded (the specification's four levels), the stereo writer fed by the
// relay's taps, the sidecar written beside each WAV, crash recovery of the
// files left in recordings/inflight/, and the listing behind
// /v1/recordings.
//
// Layout under the data directory:
//
//	recordings/inflight/<id>.wav    audio of a call in progress
//	recordings/inflight/<id>.json   what the sidecar will say (for recovery)
//	recordings/YYYY/MM/DD/<id>.wav  finished audio (the tenant's local date at the call's start)
//	recordings/YYYY/MM/DD/<id>.json the sidecar; its presence means the WAV is whole
package recording
