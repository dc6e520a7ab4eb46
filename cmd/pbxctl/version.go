package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"pbx/appliance/buildinfo"
	"pbx/appliance/manpage"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildinfo.String("pbxctl"))
			return err
		},
	}
}

func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write manual pages for pbxctl and its commands into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return manpage.WriteTree(cmd.Root(), args[0], buildinfo.Version, time.Now().UTC())
		},
	}
}
