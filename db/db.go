package db

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the database file inside the data directory.
const FileName = "pbx.db"

// SchemaVersion is the layout this program writes.
const SchemaVersion = 1

// DefaultOpenTimeout bounds the wait for the file lock.
const DefaultOpenTimeout = 2 * time.Second

// Bucket names.
var (
	bucketMeta          = []byte("meta")
	bucketRegistrations = []byte("registrations")
	// bucketMinutes holds the outbound minutes counters. It came after
	// schema 1's first files and needs no migration beyond creating it:
	// Open creates any missing bucket, and a program that does not know it
	// leaves it alone.
	bucketMinutes = []byte("minutes")
	// bucketSubscriptions holds the message-waiting subscriptions; like
	// minutes it needs no migration.
	bucketSubscriptions = []byte("subscriptions")

	keySchema = []byte("schema")

	allBuckets = [][]byte{bucketMeta, bucketRegistrations, bucketMinutes, bucketDevices, bucketDeviceTokens, bucketSubscriptions}
)

// Options configures Open.
type Options struct {
	// OpenTimeout is how long to wait for the file lock; default
	// DefaultOpenTimeout.
	OpenTimeout time.Duration
	// NoSync skips fsync on commit (tests and benchmarks only).
	NoSync bool
}

// DB is an open database.
type DB struct {
	bolt *bolt.DB
	path string
	log  *slog.Logger
}

// Open opens (creating if needed) <dataDir>/pbx.db, creates missing buckets
// and checks the schema version.
func Open(dataDir string, opts Options, log *slog.Logger) (*DB, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	path := filepath.Join(dataDir, FileName)
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.OpenTimeout, NoSync: opts.NoSync})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("open database %s: %w (waited %s for its lock)", path, ErrInUse, opts.OpenTimeout)
		}
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	d := &DB{bolt: b, path: path, log: log}
	if err := d.init(); err != nil {
		_ = b.Close()
		return nil, err
	}
	return d, nil
}

func (d *DB) init() error {
	return d.bolt.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keySchema)
		if v == nil {
			return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return fmt.Errorf("database schema version %q: %w", v, err)
		}
		if n > SchemaVersion {
			return fmt.Errorf("%s has schema %d, this program knows %d: %w", d.path, n, SchemaVersion, ErrSchemaTooNew)
		}
		return nil
	})
}

// Path is the database file's path.
func (d *DB) Path() string { return d.path }

// Schema returns the schema version stored in the file.
func (d *DB) Schema() (int, error) {
	var n int
	err := d.bolt.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keySchema)
		var err error
		n, err = strconv.Atoi(string(v))
		return err
	})
	return n, err
}

// Close closes the file and releases its lock.
func (d *DB) Close() error {
	if err := d.bolt.Close(); err != nil {
		return fmt.Errorf("close database: %w", err)
	}
	return nil
}
