package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"pbx/appliance/config"
)

func newValidateCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "validate [DIR]",
		Short: "Check the configuration and report every problem",
		Long: `validate reads every *.yaml and *.yml document under the configuration directory
(default /etc/pbx) exactly as the daemon does and prints one line per problem:

  FILE:LINE: KIND/NAME: path.to.field: message

All problems are reported in one run, sorted by file and line. Warnings (deprecated keys,
silent pitfalls, settings that are accepted but have no effect) are printed as
"warning:" lines and do not change the exit status.

Exit status: 0 clean, 1 problems found, 2 usage error.`,
		Example: `  pbxctl validate /etc/pbx
  pbxctl validate --config ./conf --format json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usageError{fmt.Errorf("--format must be text or json, not %q", format)}
			}
			dir, err := configDir(cmd, args)
			if err != nil {
				return err
			}
			_, rep, err := config.Load(dir, config.Options{})
			if err != nil {
				if errors.Is(err, config.ErrNotDirectory) {
					return usageError{err}
				}
				return err
			}
			out := cmd.OutOrStdout()
			if format == "json" {
				err = rep.WriteJSON(out)
			} else {
				err = rep.WriteText(out)
				if err == nil && rep.OK() {
					_, err = fmt.Fprintf(out, "%s: configuration is valid (%d warning(s))\n", dir, len(rep.Warnings))
				}
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return exitError{exitProblems}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&format, "format", "o", "text", "output format: text or json")
	cmd.Flags().StringP("config", "c", "", "configuration directory (default $PBX_CONFIG or /etc/pbx)")
	return cmd
}
