package db

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"pbx/sipcore/registrar"
)

func TestOpenTwiceIsInUse(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = Open(dir, Options{OpenTimeout: 100 * time.Millisecond}, nil)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second open: got %v, want ErrInUse", err)
	}
	if n, err := d.Schema(); err != nil || n != SchemaVersion {
		t.Fatalf("schema = %d, %v", n, err)
	}
}

func TestRegistrationsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	b1 := registrar.Binding{Tenant: "acme", Username: "alice", Extension: "101", Contact: "sip:alice@10.0.0.1:5062",
		Source: netip.MustParseAddrPort("10.0.0.1:5062"), Transport: "udp", Expires: now.Add(time.Hour), CallID: "c1", CSeq: 7}
	b2 := b1
	b2.Contact = "sip:alice@10.0.0.2:5062"
	st := d.Registrations()
	if err := st.SaveBindings([]registrar.Binding{b1, b2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveBindings(nil, []string{b2.Key()}); err != nil {
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
	got, err := d.Registrations().LoadBindings()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Contact != b1.Contact || got[0].Source != b1.Source || !got[0].Expires.Equal(b1.Expires) || got[0].CSeq != 7 {
		t.Fatalf("loaded %+v", got)
	}
}
