package sipcore

import "time"

// RegisterBacklog is how many REGISTERs over UDP can be handled or wait
// for a worker at once before new ones are answered 503.
const RegisterBacklog = registerWorkers + registerQueueLen

// SetRegisterLinger makes a REGISTER's answer stay cached d to 2d; it
// returns the restore function. Call it before New.
func SetRegisterLinger(d time.Duration) (restore func()) {
	old := registerLinger
	registerLinger = d
	return func() { registerLinger = old }
}

// SetUDPGenerations makes a UDP reader generation last sources source
// changes and a retired one linger grace, for the tests; it returns the
// restore function. Call it before New.
func SetUDPGenerations(sources int, grace time.Duration) (restore func()) {
	oldSources, oldGrace := udpGenerationSources, udpRetireGrace
	udpGenerationSources, udpRetireGrace = sources, grace
	return func() { udpGenerationSources, udpRetireGrace = oldSources, oldGrace }
}

// LiveHeap is liveHeap, for the external tests' memory benchmarks.
var LiveHeap = liveHeap
