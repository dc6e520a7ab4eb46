package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"pbx/appliance/cdr"
)

func newRepairCmd() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Recover call records after a crash, offline",
		Long: `repair does what the daemon's startup recovery does, over every day of every tenant:

  - an in-flight marker whose call was never committed becomes an incomplete record
    (cause "incomplete", end = the marker's last modification time);
  - a marker whose record is already committed is removed;
  - a complete <id>.json.tmp left between write and rename is committed;
  - other temporary files are removed;
  - a torn last index line is cut, missing index lines are added, and an index with
    damaged, duplicate or orphan lines is rewritten.

Each change is printed. With --dry-run nothing is changed and the changes that would be
made are printed. The daemon must be stopped: repair takes the data directory lock.
Running it twice changes nothing the second time.

Exit status: 0 done, 1 failed (or the daemon is running), 2 usage error.`,
		Example: `  pbxctl repair --data-dir /var/lib/pbx --dry-run
  pbxctl repair --data-dir /var/lib/pbx`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, lock, err := openOffline(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			report, finish := progress(cmd.ErrOrStderr(), "repair")
			acts, err := s.Repair(cmd.Context(), cdr.RepairOptions{Full: true, DryRun: dryRun, Progress: report})
			finish()
			out := cmd.OutOrStdout()
			prefix := ""
			if dryRun {
				prefix = "dry run: "
			}
			for _, a := range acts {
				fmt.Fprintf(out, "%s%s\n", prefix, a)
			}
			if err != nil {
				return fmt.Errorf("repair: %w", err)
			}
			switch {
			case len(acts) == 0:
				fmt.Fprintln(out, "repair: nothing to repair, nothing changed")
			case dryRun:
				fmt.Fprintf(out, "repair: dry run, %d changes would be made, nothing changed\n", len(acts))
			default:
				fmt.Fprintf(out, "repair: %d changes made\n", len(acts))
			}
			return nil
		},
	}
	addDataDirFlags(cmd)
	cmd.Flags().BoolVarP(&dryRun, "dry-run", "n", false, "print the changes without making them")
	return cmd
}
