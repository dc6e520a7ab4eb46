package sipcore

import "time"

// SetUDPGenerations makes a UDP reader generation last sources source
// changes and a retired one linger grace, for the tests; it returns the
// restore function. Call it before New.
func SetUDPGenerations(sources int, grace time.Duration) (restore func()) {
	oldSources, oldGrace := udpGenerationSources, udpRetireGrace
	udpGenerationSources, udpRetireGrace = sources, grace
	return func() { udpGenerationSources, udpRetireGrace = oldSources, oldGrace }
}
