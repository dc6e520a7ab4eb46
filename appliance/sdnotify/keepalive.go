package sdnotify

import (
	"context"
	"time"
)

// KeepAlive feeds the service watchdog at half of WatchdogInterval for as long as
// healthy reports true, until ctx ends. A nil healthy counts as always healthy. It
// returns nil at once when the watchdog is off, so the daemon can always run it in
// its errgroup:
//
//	g.Go(func() error { return sdnotify.KeepAlive(ctx, app.Healthy) })
//
// A failed send is not an error: if the daemon cannot reach systemd, the missed
// pings are the report. While healthy reports false no ping is sent, and systemd
// aborts and restarts the service once the interval passes.
func KeepAlive(ctx context.Context, healthy func() bool) error {
	interval := WatchdogInterval()
	if interval <= 0 {
		return nil
	}
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	for {
		if healthy == nil || healthy() {
			_ = Watchdog()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
