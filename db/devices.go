package db

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Buckets of the device sessions (the mobile device API). Like the minutes
// bucket they need no migration: Open creates them.
var (
	// bucketDevices holds one DeviceSession per tenant, account and
	// device id, keyed by DeviceKey.
	bucketDevices = []byte("devices")
	// bucketDeviceTokens maps the hex SHA-256 of a device token to its
	// session's key, so a bearer token finds its session in one read.
	bucketDeviceTokens = []byte("device_tokens")

	keyDeviceSecret = []byte("device_secret")
)

// ErrNoDevice is returned for a device session that is not stored.
var ErrNoDevice = errors.New("no such device session")

// DeviceSession is one device's session as stored: never the token, only
// its SHA-256 (hex), and never the password, only a keyed fingerprint of it.
type DeviceSession struct {
	Tenant      string          `json:"tenant"`
	Account     string          `json:"account"`
	Extension   string          `json:"extension"`
	DeviceID    string          `json:"device_id"`
	Platform    string          `json:"platform"`
	Push        json.RawMessage `json:"push"`
	TokenHash   string          `json:"token_hash"`
	Fingerprint string          `json:"password_fingerprint"`
	CreatedAt   time.Time       `json:"created_at"`
	RefreshedAt time.Time       `json:"refreshed_at"`
	ExpiresAt   time.Time       `json:"expires_at"`
}

// Key is the session's key in the devices bucket: one session per tenant,
// account and device id.
func (s *DeviceSession) Key() string { return DeviceKey(s.Tenant, s.Account, s.DeviceID) }

// DeviceKey names a device session; NUL cannot occur in any part.
func DeviceKey(tenant, account, deviceID string) string {
	return tenant + "\x00" + account + "\x00" + deviceID
}

// Devices stores device sessions.
type Devices struct{ d *DB }

// Devices returns the accessor for the device session buckets.
func (d *DB) Devices() *Devices { return &Devices{d: d} }

// Secret returns the install's random key for password fingerprints,
// creating it on first use. It never leaves the database file.
func (v *Devices) Secret() ([]byte, error) {
	var out []byte
	err := v.d.bolt.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if k := meta.Get(keyDeviceSecret); len(k) == 32 {
			out = append([]byte(nil), k...)
			return nil
		}
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		out = k
		return meta.Put(keyDeviceSecret, k)
	})
	if err != nil {
		return nil, fmt.Errorf("device secret: %w", err)
	}
	return out, nil
}

// Put stores s, replacing the session of the same key and revoking its
// token at once, in one transaction.
func (v *Devices) Put(s *DeviceSession) error {
	val, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode device session: %w", err)
	}
	key := []byte(s.Key())
	err = v.d.bolt.Update(func(tx *bolt.Tx) error {
		bk, idx := tx.Bucket(bucketDevices), tx.Bucket(bucketDeviceTokens)
		if old := bk.Get(key); old != nil {
			var o DeviceSession
			if json.Unmarshal(old, &o) == nil && o.TokenHash != "" {
				if err := idx.Delete([]byte(o.TokenHash)); err != nil {
					return err
				}
			}
		}
		if err := bk.Put(key, val); err != nil {
			return err
		}
		return idx.Put([]byte(s.TokenHash), key)
	})
	if err != nil {
		return fmt.Errorf("save device session: %w", err)
	}
	return nil
}

// ByToken returns the session whose token hashes to hash; ErrNoDevice when
// there is none.
func (v *Devices) ByToken(hash string) (*DeviceSession, error) {
	var out *DeviceSession
	err := v.d.bolt.View(func(tx *bolt.Tx) error {
		key := tx.Bucket(bucketDeviceTokens).Get([]byte(hash))
		if key == nil {
			return ErrNoDevice
		}
		val := tx.Bucket(bucketDevices).Get(key)
		if val == nil {
			return ErrNoDevice
		}
		var s DeviceSession
		if err := json.Unmarshal(val, &s); err != nil {
			return fmt.Errorf("decode device session: %w", err)
		}
		if s.TokenHash != hash { // a stale index entry
			return ErrNoDevice
		}
		out = &s
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes the session with key and its token; ErrNoDevice when
// there is none.
func (v *Devices) Delete(key string) error {
	err := v.d.bolt.Update(func(tx *bolt.Tx) error { return deleteDevice(tx, []byte(key)) })
	if errors.Is(err, ErrNoDevice) {
		return err
	}
	if err != nil {
		return fmt.Errorf("delete device session: %w", err)
	}
	return nil
}

func deleteDevice(tx *bolt.Tx, key []byte) error {
	bk := tx.Bucket(bucketDevices)
	val := bk.Get(key)
	if val == nil {
		return ErrNoDevice
	}
	var s DeviceSession
	if json.Unmarshal(val, &s) == nil && s.TokenHash != "" {
		if err := tx.Bucket(bucketDeviceTokens).Delete([]byte(s.TokenHash)); err != nil {
			return err
		}
	}
	return bk.Delete(key)
}

// DeleteWhere removes every session for which drop returns true and
// returns how many it removed, in one transaction.
func (v *Devices) DeleteWhere(drop func(*DeviceSession) bool) (int, error) {
	n := 0
	err := v.d.bolt.Update(func(tx *bolt.Tx) error {
		var keys [][]byte
		err := tx.Bucket(bucketDevices).ForEach(func(k, val []byte) error {
			var s DeviceSession
			if err := json.Unmarshal(val, &s); err != nil || drop(&s) {
				keys = append(keys, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := deleteDevice(tx, k); err != nil {
				return err
			}
		}
		n = len(keys)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete device sessions: %w", err)
	}
	return n, nil
}

// List returns every stored session. A value that does not decode is
// skipped and logged.
func (v *Devices) List() ([]DeviceSession, error) {
	var out []DeviceSession
	err := v.d.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDevices).ForEach(func(k, val []byte) error {
			var s DeviceSession
			if err := json.Unmarshal(val, &s); err != nil {
				v.d.log.Warn("skipping unreadable device session", "err", err)
				return nil
			}
			out = append(out, s)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list device sessions: %w", err)
	}
	return out, nil
}
