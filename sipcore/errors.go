package sipcore

import "errors"

var (
	// ErrTransportUnsupported is returned by New for a listener whose transport
	// is not wired to the SIP stack (tls, wss) or is unknown.
	ErrTransportUnsupported = errors.New("transport not supported by the SIP stack")

	// ErrBind is wrapped by New when a listener cannot bind its address.
	ErrBind = errors.New("bind listener")

	// ErrNoListener is returned when no listener exists for a transport.
	ErrNoListener = errors.New("no listener for transport")

	// ErrInvalidOptions is wrapped by New for options that cannot work.
	ErrInvalidOptions = errors.New("invalid sip options")
)
