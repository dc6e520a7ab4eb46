package db

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestMinutesSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	month := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	want := Minutes{HourStart: hour, Hour: 90 * time.Second, MonthStart: month, Month: 42 * time.Minute}
	if err := d.Minutes().SaveMinutes(map[string]Minutes{"acme": want}); err != nil {
		t.Fatal(err)
	}
	want.Hour += time.Second // a later save replaces the value
	if err := d.Minutes().SaveMinutes(map[string]Minutes{"acme": want, "globex": {}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = Open(dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := d.Minutes().LoadMinutes()
	if err != nil {
		t.Fatal(err)
	}
	a := got["acme"]
	if len(got) != 2 || !a.HourStart.Equal(hour) || a.Hour != 91*time.Second || !a.MonthStart.Equal(month) || a.Month != 42*time.Minute {
		t.Fatalf("loaded %+v, want acme %+v and globex", got, want)
	}
}

// TestOpenAddsMinutesBucketToOlderFile: a schema-1 file written before the
// minutes bucket existed opens, keeps its registrations and gains the
// bucket, with its schema version unchanged.
func TestOpenAddsMinutesBucketToOlderFile(t *testing.T) {
	dir := t.TempDir()
	b, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keySchema, []byte(strconv.Itoa(1))); err != nil {
			return err
		}
		regs, err := tx.CreateBucket(bucketRegistrations)
		if err != nil {
			return err
		}
		return regs.Put([]byte("k"), []byte(`{"tenant":"acme","username":"alice"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n, err := d.Registrations().Count(); err != nil || n != 1 {
		t.Fatalf("registrations %d, %v; want the old one kept", n, err)
	}
	if err := d.Minutes().SaveMinutes(map[string]Minutes{"acme": {Month: time.Minute}}); err != nil {
		t.Fatalf("save into the added bucket: %v", err)
	}
	if n, err := d.Schema(); err != nil || n != 1 {
		t.Fatalf("schema %d, %v; want 1 unchanged", n, err)
	}
}
