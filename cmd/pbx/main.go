// Command pbx is the PBX daemon.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pbx/appliance"
	"pbx/appliance/buildinfo"
	"pbx/appliance/config"
	"pbx/appliance/logging"
	"pbx/appliance/manpage"
)

const defaultConfigDir = "/etc/pbx"

type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	root := newRootCmd()
	err := root.Execute()
	if err == nil {
		return
	}
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "pbx:", err)
	os.Exit(1)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "pbx",
		Short:         "Multi-tenant SIP PBX daemon",
		Long:          "pbx is a multi-tenant SIP PBX: phones register to it, calls between them and to carrier trunks are bridged with their media relayed through it, and it keeps call records.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), buildinfo.Command("pbx"), manpage.Command(buildinfo.Version))
	return root
}

func newRunCmd() *cobra.Command {
	var dir, level string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the PBX",
		Long: `run loads every configuration document under --config, refuses to start on any
problem (printing each as FILE:LINE: KIND/NAME: path: message), binds every listener,
then serves until stopped.

Signals: SIGTERM drains (new calls get 503, calls in progress may finish until
--drain-timeout), a second SIGTERM or SIGINT stops at once, SIGHUP reloads the API
credential set only (a set that fails validation, or turns the API on or off,
leaves the running one in place).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				dir = os.Getenv("PBX_CONFIG")
			}
			if dir == "" {
				dir = defaultConfigDir
			}
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(level)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			// Records are coalesced into few writes to stderr (a few
			// lines per call are one system call per batch under load);
			// stderr is the Coalescer from here on, so nothing overtakes
			// a queued record.
			out := logging.NewCoalescer(os.Stderr, 0, 0)
			defer out.Flush()
			stderr = out
			// Floods (malformed input, unknown methods, failed
			// authentication) are rate-limited per kind and in all.
			limited := logging.NewRateLimit(logging.NewFormat(out, lv, logging.Detect(os.Stderr)).Handler(), logging.DefaultLimits)
			defer limited.Flush(context.Background())
			log := slog.New(limited)
			slog.SetDefault(log)
			return run(cmd.Context(), dir, drain, log)
		},
	}
	cmd.Flags().StringVarP(&dir, "config", "c", "", "configuration directory (default $PBX_CONFIG or /etc/pbx)")
	cmd.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().DurationVar(&drain, "drain-timeout", appliance.DefaultDrainTimeout, "how long calls may continue after SIGTERM")
	return cmd
}

// stderr is where run writes what is not a log record: the log's
// Coalescer once run's command has made it.
var stderr io.Writer = os.Stderr

func run(parent context.Context, dir string, drain time.Duration, log *slog.Logger) error {
	cfg, rep, err := config.Load(dir, config.Options{})
	if err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		log.Warn("configuration: " + w.String())
	}
	if !rep.OK() {
		_ = rep.WriteText(stderr)
		fmt.Fprintf(stderr, "pbx: refusing to start: %d configuration problem(s)\n", len(rep.Problems))
		return exitError{1}
	}
	app, err := appliance.New(cfg, appliance.Options{ConfigDir: dir, DrainTimeout: drain}, log)
	if err != nil {
		return err
	}
	defer app.Close()
	stopPprof, err := startPprof(log)
	if err != nil {
		return err
	}
	defer stopPprof()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		var drainTimer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-drainTimer:
				log.Warn("drain timeout reached; stopping with calls in progress", "calls", app.ActiveCalls())
				stop()
				return
			case s := <-sigs:
				switch s {
				case syscall.SIGHUP:
					rep, err := app.Reload()
					switch {
					case errors.Is(err, appliance.ErrNothingToReload):
						log.Warn("reload: " + err.Error())
					case errors.Is(err, appliance.ErrReloadRefused):
						log.Error("reload refused; the running API credentials stay", "err", err)
					case err != nil:
						log.Error("reload failed; the running API credentials stay", "err", err)
					case !rep.OK():
						for _, p := range rep.Problems {
							log.Error("reload: " + p.String())
						}
						log.Error("reload refused; the running API credentials stay", "problems", len(rep.Problems))
					default:
						log.Info("reloaded API credentials")
					}
				case syscall.SIGINT:
					log.Info("stopping now (SIGINT)")
					stop()
					return
				case syscall.SIGTERM:
					if drainTimer != nil {
						log.Info("stopping now (second SIGTERM)")
						stop()
						return
					}
					n := app.ActiveCalls()
					log.Info("draining: new calls are refused", "calls", n, "timeout", drain.String())
					app.Drain()
					if n == 0 {
						stop()
						return
					}
					drainTimer = time.After(drain)
					go waitIdle(ctx, app, stop)
				}
			}
		}
	}()
	err = app.Run(ctx)
	log.Info("stopped")
	return err
}

// waitIdle stops the appliance once the last call of a drain has ended.
func waitIdle(ctx context.Context, app *appliance.Appliance, stop func()) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if app.ActiveCalls() == 0 {
				stop()
				return
			}
		}
	}
}
