package registrar

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock the sweep timer's goroutine may read.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration)  { c.ns.Add(int64(d)) }
func newFakeClock(t time.Time) *fakeClock { c := &fakeClock{}; c.ns.Store(t.UnixNano()); return c }
func authorize(t *testing.T, a *Auth, nonce string, nc uint32) Result {
	t.Helper()
	return a.Check(signedRegister(t, a, nonce, "alice", "pw", nc), false, "acme.example")
}

// After a load nothing is inserted; the sweep timer alone must empty the
// replay table once its nonces expire, and then stop.
func TestNonceTableSweptWithoutInserts(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	a, err := NewAuth(AuthOptions{NonceTTL: 10 * time.Second, Now: clock.now}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if r := authorize(t, a, a.newNonce("acme.example"), 1); r.Outcome != Authorized {
			t.Fatalf("register: %+v", r)
		}
	}
	if n := a.NonceCount(); n != 100 {
		t.Fatalf("tracked %d nonces, want 100", n)
	}
	if !a.sweeping.Load() {
		t.Fatal("no sweep timer armed with nonces tracked")
	}
	clock.add(11 * time.Second)
	deadline := time.Now().Add(4 * nonceSweepEvery)
	for a.NonceCount() > 0 || a.sweeping.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("after expiry: %d nonces tracked, timer armed %v", a.NonceCount(), a.sweeping.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A shard whose live entries fall under half its high-water mark
// is copied into a fresh map, keeping the live nonces and their counts: a
// replayed nc still fails after the rebuild.
func TestNonceTableRebuildKeepsLiveCounts(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	a, err := NewAuth(AuthOptions{NonceTTL: 10 * time.Second, Now: clock.now}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	const old = ncShards * rebuildFloor * 2
	for range old {
		if r := authorize(t, a, a.newNonce("acme.example"), 1); r.Outcome != Authorized {
			t.Fatalf("register: %+v", r)
		}
	}
	clock.add(5 * time.Second)
	var live []string
	for range 64 {
		nonce := a.newNonce("acme.example")
		if r := authorize(t, a, nonce, 3); r.Outcome != Authorized {
			t.Fatalf("register: %+v", r)
		}
		live = append(live, nonce)
	}
	clock.add(6 * time.Second) // the old ones expired, the live ones not
	nowS := clock.now().Unix()
	rebuilt := 0
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		before := sh.high
		sh.sweep(nowS)
		if before >= rebuildFloor && sh.high == len(sh.m) && sh.high < before/4 {
			rebuilt++
		}
		sh.mu.Unlock()
	}
	if rebuilt < ncShards/2 {
		t.Fatalf("%d of %d shards rebuilt", rebuilt, ncShards)
	}
	if n := a.NonceCount(); n != len(live) {
		t.Fatalf("tracked %d nonces after the sweep, want %d", n, len(live))
	}
	for _, nonce := range live {
		if r := authorize(t, a, nonce, 3); r.Outcome == Authorized {
			t.Fatal("replayed nc accepted after a rebuild")
		}
		if r := authorize(t, a, nonce, 4); r.Outcome != Authorized {
			t.Fatalf("next nc after a rebuild: %+v", r)
		}
	}
}

// BenchmarkNonceTableMemoryReturn fills the replay table as a REGISTER
// load at 16,000/s does within one NonceTTL (a fresh nonce per
// registration, as SIPp's answers to 401 use), lets the nonces expire
// with no further inserts, and reports the live heap before, with the
// table full, and once the sweep timer emptied it (after a collection).
//
//	go test -run '^$' -bench NonceTableMemoryReturn -benchtime 1x ./sipcore/registrar/
func BenchmarkNonceTableMemoryReturn(b *testing.B) {
	const n = 16000 * 30
	for range b.N {
		clock := newFakeClock(time.Unix(1_800_000_000, 0))
		a, err := NewAuth(AuthOptions{Now: clock.now}, staticDir{})
		if err != nil {
			b.Fatal(err)
		}
		idle := liveHeap()
		exp := clock.now().Add(DefaultNonceTTL)
		var key nonceKey
		for i := range n {
			binary.LittleEndian.PutUint64(key[:], uint64(i)*0x9e3779b97f4a7c15)
			if !a.useNonce(key, true, 1, exp, clock.now()) {
				b.Fatalf("nonce %d refused", i)
			}
		}
		full := liveHeap()
		clock.add(DefaultNonceTTL)
		deadline := time.Now().Add(4 * nonceSweepEvery)
		for a.NonceCount() > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d nonces still tracked", a.NonceCount())
			}
			time.Sleep(50 * time.Millisecond)
		}
		after := liveHeap()
		const mb = 1 << 20
		b.ReportMetric(float64(full-idle)/mb, "table_full_MB")
		b.ReportMetric((float64(after)-float64(idle))/mb, "table_after_MB")
		runtime.KeepAlive(a)
	}
}

// liveHeap collects and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
