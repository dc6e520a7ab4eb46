package registrar

// LiveHeap is liveHeap, for the external tests' memory benchmarks.
var LiveHeap = liveHeap
