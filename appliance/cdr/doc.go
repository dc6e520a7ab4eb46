// Package cdr owns call records: building them, the in-flight marker of an
// answered call, the commit of the final record, the per-day index, startup
// recovery and offline repair, reindexing, the retention janitor, and the
// listing with opaque cursors behind /v1/cdr.
//
// It speaks in records, not SIP: the composition root turns call lifecycle
// events into Answered (write or rewrite the in-flight marker) and Commit
// (write the final record) calls. It does not know about HTTP either: query
// errors are sentinels (ErrBadCursor, ErrRange, ErrLimit, ErrFilter) that the
// API maps to 400, ErrNotFound to 404.
//
// Layout under the data directory, per tenant:
//
//	<tenant>/cdr/YYYY/MM/DD/<id>.json    one file per call
//	<tenant>/cdr/YYYY/MM/DD/index.jsonl  one compact line per call, regenerable
//	<tenant>/cdr/inflight/<id>.json      marker of an answered call in progress
//	cdr.journal                          the commit journal (4 MiB, all tenants)
//
// The day directory is the tenant's local date of the call's start (the
// Location option decides the zone). Tenant names and ids are validated as
// single path elements; SIP Call-ID and dialog id are fields only.
//
// Durability: a record is written to <id>.json.tmp and renamed into place,
// then appended with its path to the commit journal (<dataDir>/cdr.journal,
// journal.go) and Commit returns once an fdatasync of the journal covers
// it; commits running at once share one, and one pwrite of the journal
// for the entries staged meanwhile. CommitThen, which the call log uses,
// returns once the file is in place and its entry staged and finishes the
// commit on the store's committer (commit_async.go): one journal write and
// fdatasync a batch (at most every 50 ms), the index lines a day file at a time, the
// markers' retirement (the next answered calls' markers are written into
// them and renamed from their names, one rename for a marker's removal
// and the next one's creation; those not taken are removed by the batch
// after next: spares.retire), then its done callback; so a call's goroutine waits
// neither for the disk nor behind other calls. Record files are written
// into spare files the committer stocks, kept open, in a stock directory
// of a random name under inflight/ (spare.go), so no inode is allocated
// on a call's path either, and the inodes come from a quiet block group. So a committed record survives a
// killed process (its file is in place) and a power cut (Recover writes
// again, from the journal, a record file the cut lost or tore). A record
// file torn by a cut during a commit that had not returned (not yet in the
// journal) gives way to the call's in-flight marker, which is promoted;
// without a marker (an unanswered call) it is reported unreadable, as any
// damaged record. The markers' batched syncfs checkpoints the journal. When the journal cannot
// be opened (no room for it), a record file is fsynced, renamed and its
// directory fsynced instead.
// Index lines are appended with one O_APPEND write per line under a per-file
// lock and are not fsynced: the index is derived data, and Recover repairs
// what a crash leaves (a torn last line, a missing line) in the newest days;
// Repair with Full does it for every day; Reindex rebuilds indexes outright.
//
// Write failures: a marker, record file, index line or marker removal that
// fails (a full disk) is kept in a bounded backlog (Options.MaxPending) and
// retried by Run from the step that failed, every Options.RetryMin doubling
// to RetryMax, or at once when another write succeeds; so a record is
// written exactly once, and Answered and Commit succeed. Backlog reports it
// (for /v1/status) and the store logs it once per ProblemLogInterval. Past
// the bound, or when the process stops before the disk has room, an
// answered call falls back to its marker on disk, whose modification time
// is set to the call's end (no free space needed), so the next start
// recovers it with its real end; the record of an unanswered call, which
// has no marker, is then lost, as is a marker that never reached the disk.
//
// Marker refresh: while a call lasts, Run sets the modification time of its
// marker to now every Options.MarkerRefresh (one utimensat per call in
// progress, flushed with the markers' batched syncfs), so a record
// recovered after a crash ends within that interval of the truth.
//
// Listing: List reads index files only. Each day it has read is summarised
// in memory (count, answered count, directions, up to 64 trunks and
// extensions, start range, and a Bloom filter of the 6-character substrings
// of from, to and did), so a selective filter skips days without reading
// their lines; the parsed lines of the most recently used days are kept too
// (bounded by Options.CacheEntries, about 250 bytes per line). A summary's
// Bloom filter costs 12 bits per substring: about 57 KB for a day of 2,740
// calls with 12-digit numbers, 21 MB for a year of a million calls, 2 KB
// for a day of 100 calls. Run warms the summaries at startup (about 2.5 s
// for a million lines on the reference machine); until then the first
// listing that must look at every day pays for reading them. Listed records are index entries (Entry) plus their
// tenant; Get returns the full record. See List for the paging guarantee.
//
// Caveats: the cache is per Store; two processes writing one data
// directory are prevented by the datadir lock, not here. Number filters
// shorter than six characters cannot skip days by summary.
package cdr
