package registrar

import "fmt"

// restore loads the bindings s holds; the expired ones are dropped and
// removed from s.
func (r *Registrar) restore(s Store) error {
	bs, err := s.LoadBindings()
	if err != nil {
		return fmt.Errorf("load registrations: %w", err)
	}
	now := r.now()
	var stale []string
	r.mu.Lock()
	for _, b := range bs {
		if b.Expired(now) {
			stale = append(stale, b.Key())
			continue
		}
		r.putLocked(b)
	}
	r.mu.Unlock()
	if len(stale) > 0 {
		if err := s.SaveBindings(nil, stale); err != nil {
			return fmt.Errorf("drop expired registrations: %w", err)
		}
	}
	r.log.Info("registrations restored", "count", len(bs)-len(stale), "expired", len(stale))
	return nil
}

// markDirty queues bindings put and removed for the next Flush; a later
// change to a binding supersedes an earlier one.
func (r *Registrar) markDirty(put []Binding, removed []Binding) {
	if r.opts.Store == nil || (len(put) == 0 && len(removed) == 0) {
		return
	}
	r.dirtyMu.Lock()
	for i := range put {
		k := put[i].Key()
		r.dirty[k] = put[i]
		delete(r.removed, k)
	}
	for i := range removed {
		k := removed[i].Key()
		delete(r.dirty, k)
		r.removed[k] = struct{}{}
	}
	r.dirtyMu.Unlock()
}

// Flush writes pending changes to the Store now.
func (r *Registrar) Flush() error {
	if r.opts.Store == nil {
		return nil
	}
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.dirtyMu.Lock()
	if len(r.dirty) == 0 && len(r.removed) == 0 {
		r.dirtyMu.Unlock()
		return nil
	}
	put := make([]Binding, 0, len(r.dirty))
	for _, b := range r.dirty {
		put = append(put, b)
	}
	remove := make([]string, 0, len(r.removed))
	for k := range r.removed {
		remove = append(remove, k)
	}
	r.dirty = map[string]Binding{}
	r.removed = map[string]struct{}{}
	r.dirtyMu.Unlock()
	if err := r.opts.Store.SaveBindings(put, remove); err != nil {
		// Put the batch back unless newer changes superseded it.
		r.dirtyMu.Lock()
		for _, b := range put {
			k := b.Key()
			if _, ok := r.dirty[k]; !ok {
				if _, gone := r.removed[k]; !gone {
					r.dirty[k] = b
				}
			}
		}
		for _, k := range remove {
			if _, ok := r.dirty[k]; !ok {
				r.removed[k] = struct{}{}
			}
		}
		r.dirtyMu.Unlock()
		return fmt.Errorf("save registrations: %w", err)
	}
	return nil
}

// Close flushes pending changes.
func (r *Registrar) Close() error { return r.Flush() }
