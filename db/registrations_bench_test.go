package db

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"pbx/sipcore/registrar"
)

// BenchmarkSaveBindings measures the registrations write-behind: one flush
// of 5,000 refreshed bindings (what a second of REGISTER refreshes at
// 5,000/s hands the store) into a bucket already holding 20,000, per
// binding, with fsync as in service.
func BenchmarkSaveBindings(b *testing.B) {
	const stored, batch = 20000, 5000
	d, err := Open(b.TempDir(), Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	now := time.Now()
	binding := func(i int) registrar.Binding {
		return registrar.Binding{
			Tenant: "acme", Username: fmt.Sprintf("u%05d", i), Extension: fmt.Sprintf("%d", 10000+i), Domain: "acme.example",
			Contact: fmt.Sprintf("sip:u%05d@10.0.%d.%d:5060;transport=udp", i, i/250, i%250), Source: netip.MustParseAddrPort("10.0.0.1:5060"),
			Transport: "udp", CallID: fmt.Sprintf("reg-%d@10.0.0.1", i), CSeq: 1, UserAgent: "bench phone 1.0",
			Since: now, Updated: now, Expires: now.Add(time.Hour),
		}
	}
	all := make([]registrar.Binding, stored)
	for i := range all {
		all[i] = binding(i)
	}
	if err := d.Registrations().SaveBindings(all, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		put := make([]registrar.Binding, batch)
		for i := range put {
			put[i] = all[(n*batch+i*7)%stored]
			put[i].CSeq = uint32(n + 2)
			put[i].Expires = now.Add(time.Hour + time.Duration(n)*time.Second)
		}
		if err := d.Registrations().SaveBindings(put, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/binding")
}
