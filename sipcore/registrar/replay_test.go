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
	if !a.replay.sweeping.Load() {
		t.Fatal("no sweep timer armed with nonces tracked")
	}
	clock.add(11 * time.Second)
	deadline := time.Now().Add(4 * nonceSweepEvery)
	for a.NonceCount() > 0 || a.replay.sweeping.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("after expiry: %d nonces tracked, timer armed %v", a.NonceCount(), a.replay.sweeping.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Once a load's nonces expire their generations are let go whole; the
// live nonces and their counts stay: a replayed nc still fails after.
func TestReplayDropsExpiredGenerations(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	a, err := NewAuth(AuthOptions{NonceTTL: 10 * time.Second, Now: clock.now}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	const old = ncShards * 64
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
	if n := a.NonceCount(); n != old+len(live) {
		t.Fatalf("tracked %d nonces, want %d", n, old+len(live))
	}
	clock.add(6 * time.Second) // the old ones expired, the live ones not
	nowS := clock.now().Unix()
	maps := 0
	for i := range a.replay.shards {
		sh := &a.replay.shards[i]
		sh.mu.Lock()
		sh.dropExpired(nowS, a.replay.width)
		for _, g := range sh.gens {
			if g.m != nil {
				maps++
				if nowS >= (g.g+1)*a.replay.width {
					t.Errorf("expired generation %d kept", g.g)
				}
			}
		}
		sh.mu.Unlock()
	}
	if maps == 0 || maps > ncShards {
		t.Fatalf("%d generation maps kept, want one per shard holding a live nonce", maps)
	}
	if n := a.NonceCount(); n != len(live) {
		t.Fatalf("tracked %d nonces after the drop, want %d", n, len(live))
	}
	for _, nonce := range live {
		if r := authorize(t, a, nonce, 3); r.Outcome == Authorized {
			t.Fatal("replayed nc accepted after the drop")
		}
		if r := authorize(t, a, nonce, 4); r.Outcome != Authorized {
			t.Fatalf("next nc after the drop: %+v", r)
		}
	}
}

// With a TTL longer than replayGenerations seconds a generation spans
// several seconds; a nonce's count is kept until it expires, across the
// ring's slots being reused by later generations.
func TestReplayLongTTL(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	const ttl = 120 * time.Second
	a, err := NewAuth(AuthOptions{NonceTTL: ttl, Now: clock.now}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	if a.replay.width != 4 {
		t.Fatalf("generation width %d s, want 4", a.replay.width)
	}
	first := a.newNonce("acme.example")
	if r := authorize(t, a, first, 1); r.Outcome != Authorized {
		t.Fatalf("register: %+v", r)
	}
	nc := uint32(1)
	for elapsed := 7 * time.Second; elapsed < ttl; elapsed += 7 * time.Second {
		clock.add(7 * time.Second)
		// A fresh nonce a step: over the TTL they visit every slot.
		if r := authorize(t, a, a.newNonce("acme.example"), 1); r.Outcome != Authorized {
			t.Fatalf("fresh nonce at +%v: %+v", elapsed, r)
		}
		if r := authorize(t, a, first, nc); r.Outcome == Authorized {
			t.Fatalf("replayed nc %d of the first nonce accepted at +%v", nc, elapsed)
		}
		nc++
		if r := authorize(t, a, first, nc); r.Outcome != Authorized {
			t.Fatalf("nc %d of the first nonce at +%v: %+v", nc, elapsed, r)
		}
	}
	clock.add(2 * time.Second) // +121 s
	if r := authorize(t, a, first, nc+1); r.Outcome != Challenged || !r.Stale {
		t.Fatalf("expired nonce: %+v, want a stale challenge", r)
	}
}

// A nonce that expires later than one issued now was issued before the
// clock was set back: it is refused (the client is challenged afresh)
// rather than put where it could share a slot with live nonces.
func TestReplayRefusesNonceFromTheFuture(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	a, err := NewAuth(AuthOptions{NonceTTL: 10 * time.Second, Now: clock.now}, staticDir{})
	if err != nil {
		t.Fatal(err)
	}
	nonce := a.newNonce("acme.example")
	clock.add(-time.Minute)
	if r := authorize(t, a, nonce, 1); r.Outcome != Challenged || !r.Stale {
		t.Fatalf("nonce issued a minute ahead: %+v, want a stale challenge", r)
	}
	if n := a.NonceCount(); n != 0 {
		t.Fatalf("tracked %d nonces, want 0", n)
	}
	clock.add(time.Minute)
	if r := authorize(t, a, nonce, 1); r.Outcome != Authorized {
		t.Fatalf("same nonce once the clock is back: %+v", r)
	}
}

// BenchmarkNonceTableMemoryReturn fills the replay table as a REGISTER
// load at 16,000/s does within one NonceTTL (a fresh nonce per
// registration, as SIPp's answers to 401 use, issued over the 30 s), then
// inserts nothing more and reports the live heap the table holds: when
// the load ends (table_full_MB), 15 s later with the first half of its
// nonces expired (table_half_MB), and once the sweep timer emptied it
// (table_after_MB); B/op is what filling it allocated, growth included.
//
//	go test -run '^$' -bench NonceTableMemoryReturn -benchtime 1x -benchmem ./sipcore/registrar/
func BenchmarkNonceTableMemoryReturn(b *testing.B) {
	const n = 16000 * 30
	for range b.N {
		start := time.Unix(1_800_000_000, 0)
		clock := newFakeClock(start)
		a, err := NewAuth(AuthOptions{Now: clock.now}, staticDir{})
		if err != nil {
			b.Fatal(err)
		}
		idle := liveHeap()
		var key nonceKey
		for i := range n {
			issued := start.Add(DefaultNonceTTL * time.Duration(i) / n)
			clock.ns.Store(issued.UnixNano())
			binary.LittleEndian.PutUint64(key[:], uint64(i)*0x9e3779b97f4a7c15)
			if !a.useNonce(key, true, 1, issued.Add(DefaultNonceTTL), issued) {
				b.Fatalf("nonce %d refused", i)
			}
		}
		b.StopTimer()
		full := liveHeap()
		clock.ns.Store(start.Add(DefaultNonceTTL * 3 / 2).UnixNano())
		waitTracked(b, a, n/2+n/60)
		half := liveHeap()
		clock.add(DefaultNonceTTL)
		waitTracked(b, a, 0)
		after := liveHeap()
		const mb = 1 << 20
		b.ReportMetric(float64(full-idle)/mb, "table_full_MB")
		b.ReportMetric((float64(half)-float64(idle))/mb, "table_half_MB")
		b.ReportMetric((float64(after)-float64(idle))/mb, "table_after_MB")
		runtime.KeepAlive(a)
		b.StartTimer()
	}
}

// waitTracked waits for the sweep timer to bring the replay table down to
// at most n nonces.
func waitTracked(b *testing.B, a *Auth, n int) {
	deadline := time.Now().Add(4 * nonceSweepEvery)
	for a.NonceCount() > n {
		if time.Now().After(deadline) {
			b.Fatalf("%d nonces still tracked, want at most %d", a.NonceCount(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveHeap collects and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
