package sipcore

import (
	"net/netip"
	"sync"
	"time"
)

// knownSources remembers the source addresses that recently got a 2xx final
// response through a server transaction: phones that registered or called
// with valid credentials. A spoofed flood cannot earn one (it never sees the
// challenge), so past the transaction cap these sources may still open
// transactions, up to a reserve of a quarter of the cap: a legitimate phone
// keeps registering through a REGISTER flood that fills the cap.
//
// Two maps, swapped every knownTTL or when the current one holds
// knownMaxSources, bound it to 2*knownMaxSources addresses (about 60 bytes
// each) remembered for between knownTTL and twice that.
type knownSources struct {
	mu        sync.Mutex
	cur, prev map[netip.AddrPort]struct{}
	since     time.Time
}

const (
	knownTTL        = 10 * time.Minute
	knownMaxSources = 10000
)

func newKnownSources() *knownSources {
	return &knownSources{cur: map[netip.AddrPort]struct{}{}, prev: map[netip.AddrPort]struct{}{}, since: time.Now()}
}

// add remembers src.
func (k *knownSources) add(src netip.AddrPort) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.cur[src]; ok {
		return
	}
	if len(k.cur) >= knownMaxSources || time.Since(k.since) > knownTTL {
		k.prev, k.cur, k.since = k.cur, make(map[netip.AddrPort]struct{}, len(k.cur)), time.Now()
	}
	k.cur[src] = struct{}{}
}

// has reports whether src is remembered.
func (k *knownSources) has(src netip.AddrPort) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.cur[src]; ok {
		return true
	}
	_, ok := k.prev[src]
	return ok
}
