package registrar

import "time"

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
	for _, b := range removed {
		if b.Expired(now) {
			f(Expired, b)
		} else {
			f(Removed, b)
		}
	}
	for _, b := range put {
		c := Added
		for _, o := range before {
			if o.Contact == b.Contact {
				c = Refreshed
				break
			}
		}
		f(c, b)
	}
}
