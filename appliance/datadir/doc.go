// Package datadir guards the PBX data directory against two writers.
//
// The daemon takes an exclusive advisory lock on <dataDir>/pbx.lock for as
// long as it runs; offline tools (pbxctl reindex, pbxctl repair) take the
// same lock, so they refuse to run while the daemon holds the directory and
// the daemon refuses to start while a tool is working on it.
//
// Caveats: the lock is a flock(2) lock. It is released by the kernel when the
// holding process exits, however it exits, so a stale lock file never blocks a
// restart. It is advisory: a process that does not call Lock is not stopped.
// flock locks do not work across NFS mounts on every system; the data
// directory is expected on a local file system.
package datadir
