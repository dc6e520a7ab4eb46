package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"pbx/appliance/datadir"
	"strings"
)

// write stores a durable delivery before its first attempt: a temporary
// file, fsync, rename, fsync of the directory.
func (d *Dispatcher) write(j *job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("webhook job %s: %w", j.ID, err)
	}
	if err := os.MkdirAll(d.pending, 0o750); err != nil {
		return fmt.Errorf("webhook job %s: %w", j.ID, err)
	}
	if err := datadir.WriteFile(d.path(j.ID), b, 0o640); err != nil {
		return fmt.Errorf("webhook job %s: %w", j.ID, err)
	}
	return nil
}

func (d *Dispatcher) path(id string) string { return filepath.Join(d.pending, id+".json") }

// remove deletes a settled durable delivery; a failure is logged (the
// delivery would be sent again after a restart).
func (d *Dispatcher) remove(j *job) {
	err := os.Remove(d.path(j.ID))
	if err == nil {
		err = datadir.SyncDir(d.pending)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Error("webhook job not removed", "delivery", j.ID, "err", err)
	}
}

// load queues the durable deliveries a previous run left, dropping those
// whose webhook is gone or no longer takes the event, and those expired.
func (d *Dispatcher) load() error {
	ents, err := os.ReadDir(d.pending)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("webhook jobs: %w", err)
	}
	now := d.now()
	n := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".job-") { // an interrupted write
			_ = os.Remove(filepath.Join(d.pending, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d.pending, name))
		var j job
		if err == nil {
			err = json.Unmarshal(b, &j)
		}
		if err != nil || j.ID+".json" != name || len(j.Body) == 0 {
			d.log.Error("unreadable webhook job removed", "file", name, "err", err)
			_ = os.Remove(filepath.Join(d.pending, name))
			continue
		}
		j.ep = d.byKey[j.Tenant+"/"+j.Webhook]
		j.Durable = true
		switch {
		case j.ep == nil || !contains(j.ep.events, j.Event):
			d.log.Warn("webhook job dropped: its webhook no longer takes the event", "delivery", j.ID, "tenant", j.Tenant, "webhook", j.Webhook)
			d.remove(&j)
			continue
		case now.After(j.Deadline):
			d.log.Warn("webhook job expired while stopped", "delivery", j.ID, "tenant", j.Tenant, "webhook", j.Webhook)
			d.remove(&j)
			continue
		}
		d.queued++
		d.ready(&j, false)
		n++
	}
	if n > 0 {
		d.log.Info("webhook deliveries resumed", "count", n)
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
