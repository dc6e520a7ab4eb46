package b2bua

import "errors"

var (
	// ErrInvalidOptions is wrapped by New for options that cannot work.
	ErrInvalidOptions = errors.New("invalid b2bua options")
	// ErrNoSuchCall is returned by Hangup for an id that is not live.
	ErrNoSuchCall = errors.New("no such call")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("b2bua closed")
)
