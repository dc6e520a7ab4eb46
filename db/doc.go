// Package db is the PBX's embedded key-value store: one bbolt file,
// <dataDir>/pbx.db, holding what the specification does not keep as files
// (registrations so phones survive a restart, the outbound minutes counters
// of security.limits, message-waiting subscriptions, and later device
// sessions and trunk discovery results).
//
// Open takes the file's lock with a timeout: a second opener (another pbx
// process or an offline tool) gets an error wrapping ErrInUse instead of
// waiting forever. The file carries a schema version in the "meta" bucket;
// a file written by a newer schema is refused with ErrSchemaTooNew.
//
// Every bucket is created at Open, so a file written before a bucket existed
// gains it without a schema change. Typed accessors (Registrations, Minutes,
// Subscriptions) wrap one bucket each; new kinds of records get a bucket name
// in db.go and an accessor file of their own.
//
// Caveats: transactions are short and never span network I/O; callers batch
// writes (the registrar flushes its changes from a write-behind loop) because
// every committed write transaction costs an fsync. Subscriptions are written
// through, one transaction per SUBSCRIBE and NOTIFY: they come at a phone's
// pace (an hour apart, and on a mailbox change), not a flood's.
package db
