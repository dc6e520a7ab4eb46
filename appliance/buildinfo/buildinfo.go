// Package buildinfo carries the version stamped into the binaries at build time
// (go build -ldflags "-X pbx/appliance/buildinfo.Version=...").
package buildinfo

import "runtime/debug"

// Version is the product version; "dev" for an unstamped build.
var Version = "dev"

// String is the version line both binaries print.
func String(program string) string {
	s := program + " " + Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		s += " (" + bi.GoVersion + ")"
	}
	return s
}
