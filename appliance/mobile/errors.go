package mobile

import "errors"

// Errors of the mobile package.
var (
	// ErrNoRoomService: the tenant has no room service block in force.
	ErrNoRoomService = errors.New("no room service for this tenant")
	// ErrRoomNotFound: the room was never offered to this extension, or
	// its 4 hours are over. Answer 404, never 403.
	ErrRoomNotFound = errors.New("room not found")
	// ErrBadDestination: the number to call is empty or not dialable.
	ErrBadDestination = errors.New("invalid destination")
	// ErrUnavailable: the room service did not answer or failed.
	ErrUnavailable = errors.New("room service unavailable")
	// ErrGrant: an X-Pbx-Token grant is missing, unknown, used, expired
	// or for another destination.
	ErrGrant = errors.New("invalid call grant")
)
