package registrar

import "errors"

var (
	// ErrMalformedCredentials is returned by ParseCredentials for a header
	// that is not a well-formed Digest credential.
	ErrMalformedCredentials = errors.New("malformed digest credentials")

	// ErrInvalidOptions is wrapped by New for options that cannot work.
	ErrInvalidOptions = errors.New("invalid registrar options")

	// ErrBadExpires is returned by ParseExpires for a value that is not a
	// non-negative decimal number.
	ErrBadExpires = errors.New("bad expires value")
)
