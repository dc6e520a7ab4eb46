// Package appliance is the composition root of the PBX: it turns a validated
// configuration into running parts (SIP listeners, registrar, calls, call records,
// management API), plugs the features into the small interfaces sipcore and web
// declare, and owns the process lifecycle: bind everything first, report readiness,
// drain on SIGTERM, stop on SIGINT, reload API credentials on SIGHUP.
//
// It is the only place that knows every part; the parts know nothing of each other.
package appliance
