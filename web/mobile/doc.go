// Package mobile serves the device API under /v1/mobile: login, the
// device session's token, its push registration, the extension's call
// history and voicemail, and the routes that place calls and hand out room
// tokens. Every route but login runs on a device token only (never on an
// operator token), and every management API convention applies: the error
// envelope, the request id, body limits, 405 with Allow, HEAD, rate limits.
// Package web mounts it; the operator routes over the same sessions are in
// package api.
package mobile
