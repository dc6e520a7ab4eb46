package db

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"pbx/sipcore/registrar"
)

// TestAppendBindingMatchesEncodingJSON: the stored form of a binding is byte
// for byte what encoding/json wrote before, for plain bindings and for
// values it escapes or leaves out (instance ids in angle brackets, quotes,
// control and non-ASCII characters, empty optional fields, zero addresses
// and times, IPv6 with a zone, a time zone other than UTC).
func TestAppendBindingMatchesEncodingJSON(t *testing.T) {
	now := time.Date(2026, 11, 23, 21, 30, 5, 123456789, time.UTC)
	paris := time.FixedZone("CET", 3600)
	cases := []registrar.Binding{
		{},
		{
			Tenant: "acme", Username: "alice", Extension: "101", Domain: "acme.example",
			Contact: "sip:alice@10.0.0.1:5070;transport=udp", Source: netip.MustParseAddrPort("10.0.0.1:5070"),
			Transport: "udp", Local: netip.MustParseAddrPort("127.0.0.1:5060"), CallID: "abc@10.0.0.1", CSeq: 42,
			UserAgent: "Phone/1.0", Since: now, Updated: now.Add(time.Second), Expires: now.Add(time.Hour),
		},
		{
			Tenant: "t\"q", Username: "b\\s", Extension: "<1>&", Domain: "é.example", Contact: "sip:x@[2001:db8::1]:5060",
			InstanceID: `"<urn:uuid:00000000-0000-1000-8000-000A95A0E128>"`, Q: "0.5",
			Source: netip.MustParseAddrPort("[fe80::1%eth0]:5060"), Transport: "tcp", CallID: "c\x01\u2028",
			CSeq: 4294967295, UserAgent: "ua\tx\xff", Since: now.In(paris), Updated: time.Unix(0, 0), Expires: now.Add(-time.Nanosecond),
		},
	}
	for i, b := range cases {
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendBinding(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if _, err := appendBinding(nil, registrar.Binding{Expires: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("a year past 9999 encoded")
	}
}
