package trunk

import "errors"

var (
	// ErrUnknownTrunk is returned for a trunk name the Manager does not know.
	ErrUnknownTrunk = errors.New("unknown trunk")
	// ErrInvalidTrunk is wrapped by New for a trunk that cannot work.
	ErrInvalidTrunk = errors.New("invalid trunk")
	// ErrNoAddress is returned by discovery when a host resolves to nothing.
	ErrNoAddress = errors.New("host resolves to no address")
)
