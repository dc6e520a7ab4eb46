package db

import "errors"

var (
	// ErrInUse is returned by Open when another process (or another Open in
	// this one) holds the database file.
	ErrInUse = errors.New("database in use by another process")

	// ErrSchemaTooNew is returned by Open for a file written by a newer
	// version of the PBX.
	ErrSchemaTooNew = errors.New("database schema newer than this program")

	// ErrClosed is returned by operations on a closed DB.
	ErrClosed = errors.New("database closed")
)
