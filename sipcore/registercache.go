package sipcore

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// registerCache keeps the final response of each REGISTER answered over UDP
// for between one and two registerLinger periods, in two generations: a
// new entry goes into the current one, and every period the previous
// generation is dropped whole and the current one takes its place.
//
// It is kept small because under load it is most of the live heap, and the
// heap's peak (GOGC times the live heap) sizes runtime metadata the process
// never returns:
//   - an entry is a seeded 64-bit hash of the retransmission key and where
//     its answer lies, by value: no key string and no pointer per entry. Two
//     keys that collide (about 1 in 10^9 at 100,000 entries, and the seed is
//     random per process) make the second REGISTER look like a
//     retransmission of the first until the entry leaves; its sender
//     retransmits and is then answered.
//   - a 401 or 407 is not kept: its entry is dropped once it is sent, so a
//     retransmission is challenged anew, as a stateless server answers
//     (RFC 3261 8.2.7; Kamailio's sl_send_reply). A fresh challenge is as
//     good as the first one. Other answers are kept: the one to an
//     authenticated REGISTER could not be given again (its nonce count
//     would be refused as a replay).
//   - the kept answers and their destinations are appended to a few
//     arenas per generation, dropped with it, instead of a slice each.
type registerCache struct {
	max    int
	linger time.Duration // registerLinger when the cache was made
	seed   maphash.Seed
	mu     sync.Mutex
	cur    registerGen
	prev   registerGen
	timer  *time.Timer // rotates while entries remain
}

// registerGen is one generation of the cache: its entries, and the arenas
// holding their answers.
type registerGen struct {
	m      map[uint64]registerEntry
	arenas [][]byte
}

// registerEntry is where a REGISTER's answer lies in its generation's
// arenas: arenas[arena][off:off+n] (see registerGen.add); arena is -1
// while the REGISTER is handled.
type registerEntry struct {
	arena  int32
	off, n uint32
}

// registerLinger is how long a REGISTER's answer stays cached at least
// (at most twice that); a variable for the tests. A client retransmits a
// REGISTER whose answer it did not get T1 (500 ms), then 1 s, 2 s... later
// (RFC 3261 17.1.2.2): 2 s covers the copies sent on two lost answers in a
// row (at 0.5 and 1.5 s), 4 s those of a third. A copy that comes later
// is handled anew: one with credentials is refused as a replay of its
// nonce count and challenged with stale=true, and the client registers
// again with a fresh nonce without asking its user (RFC 7616 3.3): one
// round trip more, for a loss that rare. The answers kept are most of the
// live heap under a REGISTER load; CompletedLinger (5 s) kept two and a
// half times as many.
var registerLinger = 2 * time.Second

const (
	// registerArenaMin and registerArenaMax bound an arena's size: each
	// new arena of a generation is twice the previous one, so a light load
	// holds little and a heavy one few large arenas.
	registerArenaMin = 4 << 10
	registerArenaMax = 1 << 20
)

func newRegisterCache(max int) *registerCache {
	return &registerCache{max: max, linger: registerLinger, seed: maphash.MakeSeed(),
		cur: registerGen{m: map[uint64]registerEntry{}}}
}

// find is the entry of h and the generation holding it.
func (c *registerCache) find(h uint64) (*registerGen, registerEntry, bool) {
	if e, ok := c.cur.m[h]; ok {
		return &c.cur, e, true
	}
	if e, ok := c.prev.m[h]; ok {
		return &c.prev, e, true
	}
	return nil, registerEntry{}, false
}

// begin looks key up: seen reports a REGISTER already handled or being
// handled (res is its response, nil while it is handled); otherwise the
// REGISTER is recorded as being handled, unless the cache is full of
// REGISTERs of the current generation (full: the older one is dropped early
// instead when that makes room).
func (c *registerCache) begin(key string) (res []byte, dst netip.AddrPort, seen, full bool) {
	h := maphash.String(c.seed, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, e, ok := c.find(h); ok {
		if e.arena < 0 {
			return nil, netip.AddrPort{}, true, false
		}
		res, dst = g.get(e)
		return res, dst, true, false
	}
	if len(c.cur.m)+len(c.prev.m) >= c.max {
		if len(c.prev.m) == 0 || len(c.cur.m) >= c.max {
			return nil, netip.AddrPort{}, false, true
		}
		// Room goes to the new REGISTER before the older generation's
		// answers: they were kept at least one linger, and a retransmission
		// of one of them is merely handled anew. Shedding a REGISTER the
		// workers have time for because the cache of answered ones is
		// full would refuse service at a rate the PBX sustains.
		c.prev = registerGen{}
	}
	c.cur.m[h] = registerEntry{arena: -1}
	if c.timer == nil {
		c.timer = time.AfterFunc(c.linger, c.rotate)
	}
	return nil, netip.AddrPort{}, false, false
}

// finish keeps res, the final response of key with the given status, or
// drops key when the response is a challenge (401, 407), which a
// retransmission gets afresh.
func (c *registerCache) finish(key string, status int, res []byte, dst netip.AddrPort) {
	h := maphash.String(c.seed, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	g, _, ok := c.find(h)
	switch {
	case !ok:
	case status == 401 || status == 407:
		delete(g.m, h)
	default:
		g.m[h] = g.add(res, dst)
	}
}

// add appends dst and res to g's arenas, as the address's binary form
// after its length in one byte, then res, and returns their entry.
func (g *registerGen) add(res []byte, dst netip.AddrPort) registerEntry {
	var a [1 + 18 + 64]byte // length, address with a zone, port
	addr, _ := dst.Addr().AppendBinary(a[1:1])
	if len(addr) > len(a)-3 {
		addr = addr[:0] // an absurd zone: no destination, not sent again
	}
	a[0] = byte(len(addr))
	rec := binary.BigEndian.AppendUint16(a[:1+len(addr)], dst.Port())
	n := len(rec) + len(res)
	last := len(g.arenas) - 1
	if last < 0 || cap(g.arenas[last])-len(g.arenas[last]) < n {
		size := registerArenaMin
		if last >= 0 {
			size = min(2*cap(g.arenas[last]), registerArenaMax)
		}
		g.arenas = append(g.arenas, make([]byte, 0, max(size, n)))
		last++
	}
	off := len(g.arenas[last])
	g.arenas[last] = append(append(g.arenas[last], rec...), res...)
	return registerEntry{arena: int32(last), off: uint32(off), n: uint32(n)}
}

// get is the answer and destination of e, an entry of g with an answer.
// The bytes stay valid: an arena's written bytes are never changed.
func (g *registerGen) get(e registerEntry) (res []byte, dst netip.AddrPort) {
	rec := g.arenas[e.arena][e.off : e.off+e.n]
	l := int(rec[0])
	var addr netip.Addr
	if err := addr.UnmarshalBinary(rec[1 : 1+l]); err != nil || !addr.IsValid() {
		return nil, netip.AddrPort{}
	}
	return rec[3+l:], netip.AddrPortFrom(addr, binary.BigEndian.Uint16(rec[1+l:]))
}

// forget drops key.
func (c *registerCache) forget(key string) {
	h := maphash.String(c.seed, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur.m, h)
	delete(c.prev.m, h)
}

// rotate drops the previous generation; it runs every registerLinger
// while entries remain.
func (c *registerCache) rotate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, registerGen{m: map[uint64]registerEntry{}}
	if len(c.prev.m) == 0 {
		c.prev = registerGen{}
		c.timer = nil
		return
	}
	c.timer = time.AfterFunc(c.linger, c.rotate)
}

// size is the number of REGISTERs cached or being handled.
func (c *registerCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur.m) + len(c.prev.m)
}
