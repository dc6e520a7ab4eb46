package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"pbx/appliance/cdr"
	"pbx/appliance/datadir"
)

// resolveDataDir finds the data directory and the tenants' time zones for
// the offline call-record commands. It reads --data-dir; every tenant's day
// directories are then taken in the host's time zone.
var resolveDataDir = func(cmd *cobra.Command) (dataDir string, loc func(tenant string) *time.Location, err error) {
	dir, _ := cmd.Flags().GetString("data-dir")
	if dir == "" {
		return "", nil, usageError{fmt.Errorf("--data-dir is required")}
	}
	return dir, func(string) *time.Location { return time.Local }, nil
}

// addDataDirFlags declares the flags resolveDataDir reads.
func addDataDirFlags(cmd *cobra.Command) {
	cmd.Flags().String("data-dir", "", "PBX data directory")
	cmd.Flags().StringP("config", "c", "", "configuration directory (default $PBX_CONFIG or /etc/pbx)")
}

// openOffline resolves the data directory, takes its lock (refused while
// the daemon runs) and opens the call-record store over it.
func openOffline(cmd *cobra.Command) (*cdr.Store, *datadir.Held, error) {
	dir, loc, err := resolveDataDir(cmd)
	if err != nil {
		return nil, nil, err
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil, usageError{fmt.Errorf("data directory %s: not a directory", dir)}
	}
	lock, err := datadir.Lock(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; stop it first (systemctl stop pbx)", err)
	}
	s, err := cdr.New(cdr.Options{DataDir: dir, Location: loc}, nil)
	if err != nil {
		lock.Unlock()
		return nil, nil, err
	}
	return s, lock, nil
}

// progress returns a progress reporter that rewrites one line on w when w
// is a terminal, and nil (no output) otherwise.
func progress(w io.Writer, what string) (report func(done, total int), finish func()) {
	f, ok := w.(*os.File)
	if !ok {
		return nil, func() {}
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil, func() {}
	}
	var last time.Time
	shown := false
	report = func(done, total int) {
		if done != total && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		shown = true
		fmt.Fprintf(f, "\r%s: %d/%d days", what, done, total)
	}
	finish = func() {
		if shown {
			fmt.Fprint(f, "\r\033[K")
		}
	}
	return report, finish
}

func newReindexCmd() *cobra.Command {
	var tenant, from, to string
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Rebuild call-record index files from the record files",
		Long: `reindex regenerates each day's index.jsonl from the call record files of that day
(one <id>.json per call) and replaces the index atomically where it differs. Use it
after restoring records from a backup or when listings look wrong.

The daemon must be stopped: reindex takes the data directory lock and refuses to run
while the daemon holds it. Running it twice changes nothing the second time.

Exit status: 0 done, 1 failed (or the daemon is running), 2 usage error.`,
		Example: `  pbxctl reindex --data-dir /var/lib/pbx
  pbxctl reindex --data-dir /var/lib/pbx --tenant acme --from 2026-01-01 --to 2026-01-31`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := cdr.ReindexOptions{Tenant: tenant}
			var err error
			if tenant != "" {
				if err := cdr.ValidateTenant(tenant); err != nil {
					return usageError{err}
				}
			}
			if from != "" {
				if opts.From, err = cdr.ParseDate(from); err != nil {
					return usageError{fmt.Errorf("--from: %w", err)}
				}
			}
			if to != "" {
				if opts.To, err = cdr.ParseDate(to); err != nil {
					return usageError{fmt.Errorf("--to: %w", err)}
				}
			}
			if from != "" && to != "" && opts.To.Before(opts.From) {
				return usageError{fmt.Errorf("--to %s is before --from %s", to, from)}
			}
			s, lock, err := openOffline(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			report, finish := progress(cmd.ErrOrStderr(), "reindex")
			opts.Progress = report
			res, err := s.Reindex(cmd.Context(), opts)
			finish()
			out := cmd.OutOrStdout()
			for _, p := range res.Changed {
				fmt.Fprintf(out, "rewrote %s\n", p)
			}
			for _, p := range res.Unreadable {
				fmt.Fprintf(out, "warning: %s: record file cannot be read; not indexed\n", p)
			}
			if err != nil {
				return fmt.Errorf("reindex: %w", err)
			}
			if len(res.Changed) == 0 {
				fmt.Fprintf(out, "reindex: %d days, %d records: every index is up to date, nothing changed\n", res.Days, res.Records)
			} else {
				fmt.Fprintf(out, "reindex: %d days, %d records: %d index files rewritten\n", res.Days, res.Records, len(res.Changed))
			}
			return nil
		},
	}
	addDataDirFlags(cmd)
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	cmd.Flags().StringVar(&from, "from", "", "first day directory, YYYY-MM-DD")
	cmd.Flags().StringVar(&to, "to", "", "last day directory, YYYY-MM-DD")
	return cmd
}
