package registrar

import "strings"

// Compact copies the bindings into fresh memory. A REGISTER load refreshes
// every binding with strings cut from its request and a new bindings
// array, each allocated among the load's short-lived objects; once the
// load is over those few survivors keep whole pages of the heap in the
// process. New registers it with the SIP server (OnLoadOver), which calls
// it when a load ends, just before returning the heap to the system.
func (r *Registrar) Compact() {
	r.mu.Lock()
	defer r.mu.Unlock()
	aors := make(map[aorKey]*aor, len(r.aors))
	for k, a := range r.aors {
		bs := make([]Binding, len(a.bindings))
		for i, b := range a.bindings {
			bs[i] = b.clone()
		}
		aors[k] = &aor{extension: a.extension, bindings: bs}
	}
	r.aors = aors
}

// clone is b with its own copy of every string (a string of a parsed
// request keeps the whole request's bytes).
func (b Binding) clone() Binding {
	for _, s := range []*string{&b.Tenant, &b.Username, &b.Extension, &b.Domain, &b.Contact,
		&b.InstanceID, &b.Q, &b.Transport, &b.CallID, &b.UserAgent} {
		*s = strings.Clone(*s)
	}
	return b
}
