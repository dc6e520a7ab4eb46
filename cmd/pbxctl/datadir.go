package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"pbx/appliance/config"
)

func init() {
	resolveDataDir = dataDirFromConfig
}

// dataDirFromConfig finds the data directory and the tenants' time zones for the
// offline call-record commands from the configuration (--config, $PBX_CONFIG or
// /etc/pbx). --data-dir overrides the configured directory; without a readable
// configuration it is required, and days are then taken in the host's time zone.
func dataDirFromConfig(cmd *cobra.Command) (string, func(string) *time.Location, error) {
	override, _ := cmd.Flags().GetString("data-dir")
	root, err := configDir(cmd, nil)
	if err != nil {
		return "", nil, err
	}
	cfg, rep, err := config.Load(root, config.Options{})
	if err != nil {
		if override == "" {
			return "", nil, usageError{fmt.Errorf("%v; give --config or --data-dir", err)}
		}
		if explicit, _ := cmd.Flags().GetString("config"); explicit != "" || os.Getenv("PBX_CONFIG") != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: no configuration (%v): days are taken in the host's time zone\n", err)
		}
		return override, func(string) *time.Location { return time.Local }, nil
	}
	if !rep.OK() {
		_ = rep.WriteText(cmd.ErrOrStderr())
		if override == "" {
			return "", nil, exitError{exitProblems}
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: the configuration has problems; using its time zones as far as they load")
	}
	dir := override
	if dir == "" {
		dir = cfg.DataDir()
	}
	if dir == "" {
		return "", nil, usageError{fmt.Errorf("%s sets no dataDir; give --data-dir", root)}
	}
	if _, err := os.Stat(dir); err != nil {
		return "", nil, usageError{fmt.Errorf("data directory %s: %v", dir, err)}
	}
	return dir, cfg.LocationFunc(), nil
}
