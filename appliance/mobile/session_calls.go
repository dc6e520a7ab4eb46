package mobile

import (
	"errors"
	"time"
)

// What the device API's call routes answer (DESIGN.md 5.3). The room
// service side (grants, offers) fills them in.

// PlacedCall is the body of POST /v1/mobile/calls (202): what the app
// needs to join the room the PBX dials the destination from.
type PlacedCall struct {
	Room      string    `json:"room"`
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	To        string    `json:"to"`
	ExpiresAt time.Time `json:"expires_at"`
}

// RoomToken is the body of POST /v1/mobile/roomservice/token: a fresh
// join token for a room offered to the session's extension.
type RoomToken struct {
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Errors the call routes map to statuses.
var (
	// ErrRoomNotOffered: the room was never offered to this extension, or
	// is older than 4 hours (404, never 403).
	ErrRoomNotOffered = errors.New("no such room")
	// ErrBadDestination: the destination cannot be dialled (400).
	ErrBadDestination = errors.New("invalid destination")
	// ErrNoRoomService: no room service is configured for the tenant (404
	// not running).
	ErrNoRoomService = errors.New("room service not configured")
)
