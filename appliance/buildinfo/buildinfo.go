// Package buildinfo carries the version stamped into the binaries at build time
// (go build -ldflags "-X pbx/appliance/buildinfo.Version=...").
package buildinfo

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

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

// Command is the "version" command both binaries carry.
func Command(program string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), String(program))
			return err
		},
	}
}
