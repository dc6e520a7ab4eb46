package db

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Minutes is one tenant's outbound time under security.limits: the time
// used in one clock hour and one calendar month of the tenant's time zone,
// each named by the instant it starts.
type Minutes struct {
	HourStart  time.Time     `json:"hour_start"`
	Hour       time.Duration `json:"hour_ns"`
	MonthStart time.Time     `json:"month_start"`
	Month      time.Duration `json:"month_ns"`
}

// MinutesCounters stores each tenant's Minutes, one JSON value per tenant
// name, so a restart does not reset the outbound minutes budgets.
type MinutesCounters struct{ d *DB }

// Minutes returns the accessor for the minutes bucket.
func (d *DB) Minutes() *MinutesCounters { return &MinutesCounters{d: d} }

// LoadMinutes returns every tenant's stored counters. A value that does
// not decode is skipped and logged (that tenant starts at zero).
func (m *MinutesCounters) LoadMinutes() (map[string]Minutes, error) {
	out := map[string]Minutes{}
	err := m.d.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMinutes).ForEach(func(k, v []byte) error {
			var mn Minutes
			if err := json.Unmarshal(v, &mn); err != nil {
				m.d.log.Warn("skipping unreadable minutes counter", "tenant", string(k), "err", err)
				return nil
			}
			out[string(k)] = mn
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load minutes: %w", err)
	}
	return out, nil
}

// SaveMinutes writes the counters of the tenants in put, in one
// transaction.
func (m *MinutesCounters) SaveMinutes(put map[string]Minutes) error {
	if len(put) == 0 {
		return nil
	}
	vals := make(map[string][]byte, len(put))
	for tn, mn := range put {
		v, err := json.Marshal(mn)
		if err != nil {
			return fmt.Errorf("encode minutes of %s: %w", tn, err)
		}
		vals[tn] = v
	}
	err := m.d.bolt.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketMinutes)
		for tn, v := range vals {
			if err := bk.Put([]byte(tn), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save minutes: %w", err)
	}
	return nil
}
