// Package voicemail stores voicemail messages and runs the two local
// applications that use them: deposit (greeting, tone, record) and
// retrieval (the DTMF menu of DESIGN.md 5.7).
//
// Messages live under <dataDir>/<tenant>/voicemail/<extension>/ as <id>.wav
// and <id>.json, where id is the call record's id of the call that left the
// message; the mailbox's own greeting is greeting.wav in the same
// directory. Audio is streamed to a temporary file while it is recorded, so
// that a crash keeps what was said: Open promotes such a file.
package voicemail
