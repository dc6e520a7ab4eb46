package b2bua

import (
	"pbx/sipcore/registrar"
)

// LegsFor turns registered bindings into fork legs: each goes to the
// binding's Target (the Contact, the NAT source, or over TCP the registering
// connection while connOpen says it is open). name and extension label the
// legs on the call record.
func LegsFor(bindings []registrar.Binding, connOpen registrar.ConnChecker, name, extension string) []LegTarget {
	legs := make([]LegTarget, 0, len(bindings))
	for _, b := range bindings {
		tg, ok := b.Target(connOpen)
		if !ok {
			continue
		}
		legs = append(legs, LegTarget{
			URI: tg.URI, Destination: tg.Destination, Transport: tg.Transport, Local: tg.Local,
			Kind: KindEndpoint, Name: name, Extension: extension,
		})
	}
	return legs
}
