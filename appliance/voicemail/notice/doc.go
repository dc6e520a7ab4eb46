// Package notice emails a voicemail notice per message through the
// tenant's effective SMTP settings (DESIGN 5.7), by way of a durable
// outbox under <dataDir>/notices/.
//
// # Outbox
//
// Enqueue writes one JSON job file per notice to notices/pending/
// (temporary file, fsync, rename, fsync of the directory) and returns only
// then, so a notice accepted is on disk before the first attempt. Run
// sends due jobs one at a time; a failed attempt is retried after 30 s,
// doubling to 30 min with jitter, and a job still unsent 7 days after it
// was queued moves to notices/failed/ with an error log line. An SMTP
// server that is down or refusing for an hour only delays notices.
//
// # Delivery semantics: at least once, duplicates confined to one window
//
// A job's state is pending, sending or sent. The outbox writes sending
// (durably) just before the DATA command and sent (durably) as soon as the
// server has accepted the message's final dot, then deletes the file. On
// Open a sent job is deleted and never sent again; a pending job is sent
// normally. A job found in sending state is sent again: the previous run
// died while the server was receiving it, and the outbox cannot know
// whether the server kept it. Losing the notice would be worse than a
// duplicate, so the outbox chooses at-least-once there; the copy carries
// the same Message-ID, which lets mail systems and clients drop it. A
// graceful stop never opens that window: Run lets a conversation in
// progress finish (bounded by smtp.timeout) before it returns. Only a
// crash between the server's acceptance and the sent mark, a few
// milliseconds, can lead to a second copy.
package notice
