package db

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"pbx/sipcore/registrar"
)

// Registrations stores registrar bindings, one JSON value per
// registrar.Binding.Key. It implements registrar.Store.
type Registrations struct{ d *DB }

// Registrations returns the accessor for the registrations bucket.
func (d *DB) Registrations() *Registrations { return &Registrations{d: d} }

var _ registrar.Store = (*Registrations)(nil)

// LoadBindings returns every stored binding. A value that does not decode is
// skipped and logged (the phone registers again).
func (r *Registrations) LoadBindings() ([]registrar.Binding, error) {
	var out []registrar.Binding
	err := r.d.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRegistrations).ForEach(func(k, v []byte) error {
			var b registrar.Binding
			if err := json.Unmarshal(v, &b); err != nil {
				r.d.log.Warn("skipping unreadable registration", "key", string(k), "err", err)
				return nil
			}
			out = append(out, b)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load registrations: %w", err)
	}
	return out, nil
}

// SaveBindings writes put and deletes remove in one transaction.
func (r *Registrations) SaveBindings(put []registrar.Binding, remove []string) error {
	if len(put) == 0 && len(remove) == 0 {
		return nil
	}
	// The values share one growing buffer; each keeps its own bytes for the
	// whole transaction, as bbolt requires.
	vals := make([][]byte, len(put))
	buf := make([]byte, 0, 400*len(put)) // a typical binding is 300-400 bytes
	for i, b := range put {
		start := len(buf)
		var err error
		if buf, err = appendBinding(buf, b); err != nil {
			return fmt.Errorf("encode registration: %w", err)
		}
		vals[i] = buf[start:len(buf):len(buf)]
	}
	err := r.d.bolt.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketRegistrations)
		for _, k := range remove {
			if err := bk.Delete([]byte(k)); err != nil {
				return err
			}
		}
		for i, b := range put {
			if err := bk.Put([]byte(b.Key()), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save registrations: %w", err)
	}
	return nil
}

// Count returns the number of stored bindings.
func (r *Registrations) Count() (int, error) {
	var n int
	err := r.d.bolt.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketRegistrations).Stats().KeyN
		return nil
	})
	return n, err
}
