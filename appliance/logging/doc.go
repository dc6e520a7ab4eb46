// Package logging builds the daemon's slog.Logger for where its output goes.
//
// Under systemd, when stderr is the journal stream (JOURNAL_STREAM names stderr's
// device and inode), every record is one JSON line prefixed with its syslog
// priority: "<3>" error, "<4>" warning, "<5>" levels between info and warning,
// "<6>" info, "<7>" debug. journald strips the prefix and stores the priority, so
// `journalctl -u pbx -p err` shows errors only, while the JSON stays readable by
// machines. The journal stamps each line itself, so the time attribute is left out.
// Anywhere else (a terminal, a pipe, a file) records are slog's text format.
//
// The package owns the choice of format and the priority prefix. It does not own
// levels per component, rotation (the journal rotates), or the global default
// logger: callers pass the returned logger down through constructors.
//
// Caveats: the journal is recognised only through stderr, because that is the
// descriptor JOURNAL_STREAM describes; a logger given another writer checks that
// writer's own device and inode. On systems without device numbers (non-Unix) the
// journal is never detected.
package logging
