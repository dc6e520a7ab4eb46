// Command pbxctl is the technician's tool for a pbx installation: it validates and
// migrates configuration, hashes API tokens, and repairs or re-indexes call records.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"pbx/appliance/buildinfo"
	"pbx/appliance/manpage"
)

// Exit codes: 0 success, 1 the thing checked is wrong, 2 usage.
const (
	exitProblems = 1
	exitUsage    = 2
)

// exitError carries an exit code up to main without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// defaultConfigDir is where the package installs the configuration.
const defaultConfigDir = "/etc/pbx"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "pbxctl",
		Short: "Validate, migrate and repair a pbx installation",
		Long: `pbxctl is the technician's tool for a pbx installation.

It checks the configuration documents the way the daemon reads them (every problem at
once, with file, line and field path), rewrites deprecated keys, hashes API tokens, and
repairs or re-indexes call records while the daemon is stopped.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{err}
	})
	root.AddCommand(
		newValidateCmd(),
		newConfigCmd(),
		newTokenCmd(),
		buildinfo.Command("pbxctl"),
		manpage.Command(buildinfo.Version),
		newReindexCmd(),
		newRepairCmd(),
		newPromptsCmd(),
	)
	return root
}

// usageError marks a command-line mistake (exit 2).
type usageError struct{ error }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	return exitCode(root.Execute(), os.Stderr)
}

// exitCode prints err (unless it only carries a code) and maps it to the exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "pbxctl:", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
	}
	return exitProblems
}

// isCobraUsage recognises cobra's own argument errors, which it does not type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires ", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// configDir picks the configuration root: the positional argument, else --config,
// else $PBX_CONFIG, else /etc/pbx.
func configDir(cmd *cobra.Command, args []string) (string, error) {
	flag, _ := cmd.Flags().GetString("config")
	switch {
	case len(args) > 0 && flag != "" && args[0] != flag:
		return "", usageError{fmt.Errorf("give the configuration directory once: %q or --config %q", args[0], flag)}
	case len(args) > 0:
		return args[0], nil
	case flag != "":
		return flag, nil
	case os.Getenv("PBX_CONFIG") != "":
		return os.Getenv("PBX_CONFIG"), nil
	}
	return defaultConfigDir, nil
}
