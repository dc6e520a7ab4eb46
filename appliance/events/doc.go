// Package events is the PBX's lossy, in-process event bus: calls,
// registrations, trunks, bans and counters, for the dashboard, the event
// stream and anything else that shows live state.
//
// Publishers never wait. Each subscriber has a bounded queue; an event
// that finds the queue full is dropped for that subscriber and counted, and
// the subscriber's next delivered event is a Resync marker that tells it to
// re-read the state (a snapshot) instead of trusting the events it missed.
// The bus keeps the most recent events in a ring so a reconnecting stream
// can resume after the last event it saw (Since); when that event has left
// the ring, it too starts again from a snapshot.
//
// What must not be lost (call records, upload jobs, notices) never goes
// through the bus: the specification's "Events" rule 4 allows it to drop.
package events
