package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"pbx/appliance/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print or migrate the configuration",
	}
	cmd.PersistentFlags().StringP("config", "c", "", "configuration directory (default $PBX_CONFIG or /etc/pbx)")
	cmd.AddCommand(newConfigPrintCmd(), newConfigMigrateCmd())
	return cmd
}

func loadOrReport(cmd *cobra.Command, args []string) (*config.Config, error) {
	dir, err := configDir(cmd, args)
	if err != nil {
		return nil, err
	}
	cfg, rep, err := config.Load(dir, config.Options{})
	if err != nil {
		if errors.Is(err, config.ErrNotDirectory) {
			return nil, usageError{err}
		}
		return nil, err
	}
	if !rep.OK() {
		_ = rep.WriteText(cmd.ErrOrStderr())
		return nil, exitError{exitProblems}
	}
	return cfg, nil
}

func newConfigPrintCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "print [DIR]",
		Short: "Print the effective configuration with defaults filled and secrets redacted",
		Long: `print loads the configuration, fills every default the daemon would use, and writes
the result as YAML documents. Secrets (passwords, tokens, API secrets) are shown as
[redacted]. A configuration with problems is not printed; its problems are.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadOrReport(cmd, args)
			if err != nil {
				return err
			}
			return config.Print(cmd.OutOrStdout(), cfg)
		},
	}
}

func newConfigMigrateCmd() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "migrate [DIR]",
		Short: "Rewrite deprecated keys (livekit: becomes roomservice:) in place",
		Long: `migrate renames the deprecated livekit key to roomservice in System and Tenant
documents. The rewrite touches only the key itself: comments, key order, quoting,
bare-string listeners and dataDir stay exactly as typed. With --dry-run it prints a
unified diff and changes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := configDir(cmd, args)
			if err != nil {
				return err
			}
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return usageError{fmt.Errorf("%s is not a configuration directory", dir)}
			}
			ms, err := config.Migrate(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			changed := 0
			for _, m := range ms {
				for _, n := range m.Notes {
					fmt.Fprintln(cmd.ErrOrStderr(), n)
				}
				if string(m.Before) == string(m.After) {
					continue
				}
				changed++
				if dryRun {
					fmt.Fprint(out, m.UnifiedDiff())
					continue
				}
				if err := writeInPlace(filepath.Join(dir, filepath.FromSlash(m.File)), m.After); err != nil {
					return err
				}
			}
			if changed == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "nothing to migrate")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print a unified diff instead of rewriting files")
	return cmd
}

// writeInPlace replaces a file atomically, keeping its permissions.
func writeInPlace(path string, data []byte) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".migrate-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
