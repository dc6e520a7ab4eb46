package db

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"pbx/sipcore/mwi"
)

// Subscriptions stores message-waiting subscriptions, one JSON value per
// mwi.Subscription.Key. It implements mwi.Store.
type Subscriptions struct{ d *DB }

// Subscriptions returns the accessor for the subscriptions bucket.
func (d *DB) Subscriptions() *Subscriptions { return &Subscriptions{d: d} }

var _ mwi.Store = (*Subscriptions)(nil)

// LoadSubscriptions returns every stored subscription. A value that does
// not decode is skipped and logged (the phone subscribes again).
func (s *Subscriptions) LoadSubscriptions() ([]mwi.Subscription, error) {
	var out []mwi.Subscription
	err := s.d.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSubscriptions).ForEach(func(k, v []byte) error {
			var sub mwi.Subscription
			if err := json.Unmarshal(v, &sub); err != nil {
				s.d.log.Warn("skipping unreadable subscription", "err", err)
				return nil
			}
			out = append(out, sub)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load subscriptions: %w", err)
	}
	return out, nil
}

// SaveSubscriptions writes put and deletes remove in one transaction.
func (s *Subscriptions) SaveSubscriptions(put []mwi.Subscription, remove []string) error {
	if len(put) == 0 && len(remove) == 0 {
		return nil
	}
	vals := make([][]byte, len(put))
	for i, sub := range put {
		v, err := json.Marshal(sub)
		if err != nil {
			return fmt.Errorf("encode subscription: %w", err)
		}
		vals[i] = v
	}
	err := s.d.bolt.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketSubscriptions)
		for _, k := range remove {
			if err := bk.Delete([]byte(k)); err != nil {
				return err
			}
		}
		for i, sub := range put {
			if err := bk.Put([]byte(sub.Key()), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save subscriptions: %w", err)
	}
	return nil
}

// Count returns the number of stored subscriptions.
func (s *Subscriptions) Count() (int, error) {
	var n int
	err := s.d.bolt.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketSubscriptions).Stats().KeyN
		return nil
	})
	return n, err
}
