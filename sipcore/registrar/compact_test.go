package registrar

import (
	"fmt"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// TestCompact: after Compact the registrar answers exactly as before, and
// no binding shares an array or a string of a Contact, Call-ID or
// User-Agent with what the REGISTERs left (those are what pin a load's
// pages).
func TestCompact(t *testing.T) {
	r, a := newTenantRegistrar(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	nonce := a.newNonce("acme.example")
	for i := range 20 {
		user := fmt.Sprintf("u%d", i%7)
		if res := r.register(benchRegister(t, a, nonce, user, 5060+i, uint32(i+1))); res.StatusCode != 200 {
			t.Fatalf("register %s: status %d", user, res.StatusCode)
		}
	}
	before := r.List()
	arrays := map[*Binding]bool{}
	strs := map[*byte]bool{}
	r.mu.RLock()
	for _, ao := range r.aors {
		arrays[&ao.bindings[0]] = true
		for _, b := range ao.bindings {
			strs[unsafe.StringData(b.Contact)] = true
			strs[unsafe.StringData(b.CallID)] = true
		}
	}
	r.mu.RUnlock()

	r.Compact()

	if after := r.List(); !reflect.DeepEqual(after, before) {
		t.Fatalf("bindings changed:\n%v\nwant\n%v", after, before)
	}
	if got := r.LookupAccount("acme", "u3"); len(got) != 3 {
		t.Fatalf("LookupAccount(u3) = %d bindings, want 3", len(got))
	}
	if got := r.Lookup("acme", "u3"); len(got) != 3 {
		t.Fatalf("Lookup(u3) = %d bindings, want 3", len(got))
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.aors) != 7 {
		t.Fatalf("%d addresses of record, want 7", len(r.aors))
	}
	for _, ao := range r.aors {
		if arrays[&ao.bindings[0]] {
			t.Errorf("%s kept its bindings array", ao.extension)
		}
		for _, b := range ao.bindings {
			if strs[unsafe.StringData(b.Contact)] || strs[unsafe.StringData(b.CallID)] {
				t.Errorf("%s still shares the strings of its REGISTER", b.Contact)
			}
		}
	}
}

// BenchmarkCompact: one Compact of 100,000 registered accounts (the spec's
// largest deployment); it runs once after each load, and REGISTERs wait
// only for its last pass (putting the copies in place).
func BenchmarkCompact(b *testing.B) {
	r, _ := newTenantRegistrar(b)
	exp := time.Now().Add(time.Hour)
	r.mu.Lock()
	for i := range 100000 {
		u := fmt.Sprintf("u%06d", i)
		r.putLocked(Binding{Tenant: "acme", Username: u, Extension: u, Domain: "acme.example",
			Contact: "sip:" + u + "@10.0.0.1:5060", Transport: "udp", CallID: u + "@10.0.0.1", UserAgent: "bench phone", Expires: exp})
	}
	r.mu.Unlock()
	b.ResetTimer()
	for range b.N {
		r.Compact()
	}
}

// TestCompactDuringRegisters: REGISTERs handled while Compact runs are
// never lost (an address of record that changed after Compact's copy
// keeps its new bindings). Run with -race.
func TestCompactDuringRegisters(t *testing.T) {
	r, a := newTenantRegistrar(t)
	nonce := a.newNonce("acme.example")
	const users, rounds, contacts = 50, 20, 3
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range rounds * 5 {
			r.Compact()
		}
	}()
	seq := uint32(0) // the nonce count and CSeq: one nonce for all
	last := map[string]uint32{}
	for round := range rounds {
		for u := range users {
			user := fmt.Sprintf("u%d", u)
			seq++
			if res := r.register(benchRegister(t, a, nonce, user, 5060+round%contacts, seq)); res.StatusCode != 200 {
				t.Fatalf("register %s cseq %d: status %d", user, seq, res.StatusCode)
			}
			last[user] = seq
		}
	}
	<-done
	r.Compact()
	for user, cseq := range last {
		bs := r.LookupAccount("acme", user)
		if len(bs) != contacts {
			t.Fatalf("%s has %d bindings, want %d", user, len(bs), contacts)
		}
		found := false
		for _, b := range bs {
			found = found || b.CSeq == cseq
		}
		if !found {
			t.Fatalf("%s lost its last REGISTER (CSeq %d): %v", user, cseq, bs)
		}
	}
}
