package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's target the daemon runs with
// when the environment sets no GOGC: each collection then waits until the
// heap has grown by twice its live size instead of once. The collector's
// CPU per byte allocated is proportional to 100/GOGC, and a call allocates
// tens of kilobytes (SIP messages, transactions, SDP), so at 600 calls a
// second this cuts the daemon's CPU per call by about a fifth
// (BenchmarkSIPpCallSetup's pbx_cpu_us/call); the cost is a heap peak of
// three times the live heap instead of two. An operator who wants the
// other trade sets GOGC (or GOMEMLIMIT) in the unit's environment.
const defaultGCPercent = 200

// setGCPercent applies defaultGCPercent unless GOGC is set.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(defaultGCPercent)
}

func init() { setGCPercent(os.Getenv) }
