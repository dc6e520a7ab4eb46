package registrar

import "strings"

// Compact copies the bindings into fresh memory. A REGISTER load refreshes
// every binding with strings cut from its request and a new bindings
// array, each allocated among the load's short-lived objects; once the
// load is over those few survivors keep whole pages of the heap in the
// process. New registers it with the SIP server (OnLoadOver), which calls
// it when a load ends, just before returning the heap to the system.
//
// The copies are made outside the lock (REGISTER keeps running), and an
// address of record that changed meanwhile keeps its new bindings.
func (r *Registrar) Compact() {
	type item struct {
		key   aorKey
		old   *aor
		was   []Binding // the array compacted
		fresh *aor
	}
	r.mu.RLock()
	items := make([]item, 0, len(r.aors))
	for k, a := range r.aors {
		if len(a.bindings) > 0 {
			items = append(items, item{key: k, old: a, was: a.bindings})
		}
	}
	r.mu.RUnlock()
	for i := range items {
		it := &items[i]
		// A stored bindings array is never written once stored (REGISTER
		// reads it after unlocking), so it is read here without the lock.
		bs := make([]Binding, len(it.was))
		for j, b := range it.was {
			bs[j] = b.clone()
		}
		it.fresh = &aor{bindings: bs}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		a := r.aors[it.key]
		if a != it.old || len(a.bindings) != len(it.was) || &a.bindings[0] != &it.was[0] {
			continue // changed since the copy
		}
		it.fresh.extension = a.extension
		r.aors[it.key] = it.fresh
	}
}

// clone is b with its strings copied into one new allocation of their
// own (a string cut from a parsed request keeps the whole request's bytes,
// and one allocation a binding keeps Compact quick).
func (b Binding) clone() Binding {
	fields := [...]*string{&b.Tenant, &b.Username, &b.Extension, &b.Domain, &b.Contact,
		&b.InstanceID, &b.Q, &b.Transport, &b.CallID, &b.UserAgent}
	n := 0
	for _, f := range fields {
		n += len(*f)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, f := range fields {
		sb.WriteString(*f)
	}
	all, off := sb.String(), 0
	for _, f := range fields {
		l := len(*f)
		*f = all[off : off+l]
		off += l
	}
	return b
}
