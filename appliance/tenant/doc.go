// Package tenant is the runtime directory built from the configuration: which tenant
// owns a SIP domain, its accounts by username and by extension, its ring groups,
// mailboxes, DIDs and time zone. It is immutable once built and safe for concurrent
// reads; a configuration change builds a new one (at restart).
package tenant
