// Package config turns the YAML configuration documents under a configuration root
// into typed configuration, fills the specification's defaults, and reports every
// problem at once with file, line, document and field path.
//
// Loading is strict: every key must be known (an unknown key is a problem that names
// the nearest known key), every value must have the right type, and durations are
// number-plus-unit strings ("90s", "1m30s", "2160h"; a bare number and a day unit
// are refused). Decoding never stops at the first problem: a document with a bad
// field still yields the rest of its fields, so cross-document checks run too.
//
// The package owns documents, defaults, validation, the effective per-tenant view
// (room service, SMTP, recording overrides and secret precedence), the migration of
// the old "livekit" key, and the redacted print of the effective configuration. It
// imports nothing from this module and opens no sockets; files named by the
// configuration (secrets, prompts) are read or checked for readability only.
//
// Caveats: validation does not check that dataDir exists (the specification says it
// is never checked), and a SIGHUP reload re-runs the whole load but the caller applies
// only the API credential set.
package config
