package cdr

import "errors"

// Sentinel errors. Query errors (ErrBadCursor, ErrRange, ErrLimit, ErrFilter)
// are the caller's fault and map to HTTP 400; ErrNotFound maps to 404.
var (
	// ErrNotFound: Get found no committed record with that tenant and id.
	ErrNotFound = errors.New("call record not found")
	// ErrBadCursor: a cursor that this package did not produce for this
	// query (malformed, altered, or taken from a listing with other filters).
	ErrBadCursor = errors.New("invalid cursor")
	// ErrRange: the query's To is before its From.
	ErrRange = errors.New("to is before from")
	// ErrLimit: the query's Limit is negative or above MaxLimit.
	ErrLimit = errors.New("limit out of range")
	// ErrFilter: a filter value is invalid (an unknown direction).
	ErrFilter = errors.New("invalid filter")
	// ErrTenant: a tenant name that is not a safe path element.
	ErrTenant = errors.New("invalid tenant name")
	// ErrID: a record id that does not have the form <timestamp>-<suffix>.
	ErrID = errors.New("invalid record id")
	// ErrInvalid: a record that cannot be written (unknown cause or
	// direction, missing times, end before start).
	ErrInvalid = errors.New("invalid call record")
	// ErrCommitted: Commit of a record whose id is already committed.
	ErrCommitted = errors.New("call record already committed")
)
