package registrar

import (
	"slices"
	"time"
)

// Change says what happened to a binding, for OnChange.
type Change int

// Binding changes.
const (
	Added     Change = iota // a contact registered
	Refreshed               // a registered contact re-registered
	Removed                 // un-registered, replaced, or dropped by the operator
	Expired                 // its expiry passed
)

func (c Change) String() string {
	switch c {
	case Added:
		return "added"
	case Refreshed:
		return "refreshed"
	case Removed:
		return "removed"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// notify tells OnChange about put (added or refreshed, as before says) and
// removed (expired or removed, as now says). It runs outside the
// registrar's locks.
func (r *Registrar) notify(put []Binding, before []Binding, removed []Binding, now time.Time) {
	f := r.opts.OnChange
	if f == nil {
		return
	}
	// Indexes, not copies: Bindings are large and the REGISTER goroutine's
	// stack small.
	for i := range removed {
		if removed[i].Expired(now) {
			f(Expired, removed[i])
		} else {
			f(Removed, removed[i])
		}
	}
	for i := range put {
		c := Added
		if slices.ContainsFunc(before, func(o Binding) bool { return o.Contact == put[i].Contact }) {
			c = Refreshed
		}
		f(c, put[i])
	}
}
