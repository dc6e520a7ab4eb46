package sipcore

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRegisterCacheDropsOldAnswersBeforeShedding: when the cache is full
// and part of it is the older generation (answers kept at least one
// linger), a new REGISTER gets room by dropping that generation early; only
// a cache full of the current generation sheds.
func TestRegisterCacheDropsOldAnswersBeforeShedding(t *testing.T) {
	c := testRegisterCache(4)
	defer func() {
		if c.timer != nil {
			c.timer.Stop()
		}
	}()
	dst := netip.MustParseAddrPort("127.0.0.1:5060")
	for i := range 3 {
		key := fmt.Sprintf("old%d", i)
		if _, _, seen, full := c.begin(key); seen || full {
			t.Fatalf("%s: seen %t, full %t", key, seen, full)
		}
		c.finish(key, 200, []byte("SIP/2.0 200 OK\r\n\r\n"), dst)
	}
	c.rotate() // the three answers are now the older generation
	if _, _, seen, full := c.begin("new0"); seen || full {
		t.Fatalf("new0 with room: seen %t, full %t", seen, full)
	}
	if res, _, seen, _ := c.begin("old1"); !seen || string(res) != "SIP/2.0 200 OK\r\n\r\n" {
		t.Fatalf("a cached answer below the cap is not replayed: seen %t, %q", seen, res)
	}
	// Full (3 old + 1 new): the old generation makes room for new1.
	if _, _, seen, full := c.begin("new1"); seen || full {
		t.Fatalf("new1 shed while old answers could make room: seen %t, full %t", seen, full)
	}
	if n := c.size(); n != 2 {
		t.Fatalf("%d entries after dropping the old generation, want 2", n)
	}
	if _, _, seen, _ := c.begin("old1"); seen {
		t.Fatal("a dropped answer is still replayed")
	}
	// old1 is now handled anew (current generation): cur holds new0, new1,
	// old1. One more fits, then the current generation alone is full.
	if _, _, _, full := c.begin("new2"); full {
		t.Fatal("new2 shed below the cap")
	}
	if _, _, _, full := c.begin("new3"); !full {
		t.Fatal("a cache full of the current generation does not shed")
	}
}

// testRegisterCache is a registerCache of max entries that does not rotate
// on its own.
func testRegisterCache(max int) *registerCache {
	c := newRegisterCache(max)
	c.linger = time.Hour
	return c
}

// TestRegisterCacheChallengesAreNotKept: a 401 or 407 leaves the cache once
// sent, so its retransmission is handled anew (a fresh challenge); other
// final answers are replayed byte for byte to where they went, also across a
// rotation and for an IPv6 destination with a zone.
func TestRegisterCacheChallengesAreNotKept(t *testing.T) {
	c := testRegisterCache(100000)
	defer func() {
		if c.timer != nil {
			c.timer.Stop()
		}
	}()
	dst := netip.MustParseAddrPort("127.0.0.2:5070")
	for code, status := range map[int]string{401: "401 Unauthorized", 407: "407 Proxy Authentication Required"} {
		key := "challenge " + status
		c.begin(key)
		if _, _, seen, _ := c.begin(key); !seen {
			t.Fatalf("%s: a REGISTER being handled is not absorbed", status)
		}
		c.finish(key, code, []byte("SIP/2.0 "+status+"\r\n\r\n"), dst)
		if _, _, seen, _ := c.begin(key); seen {
			t.Fatalf("%s: a challenge is kept", status)
		}
	}
	answers := map[string]netip.AddrPort{
		"SIP/2.0 200 OK":                 dst,
		"SIP/2.0 403 Forbidden":          netip.MustParseAddrPort("[fe80::1%eth0]:5062"),
		"SIP/2.0 423 Interval Too Brief": netip.MustParseAddrPort("[2001:db8::7]:5064"),
		"SIP/2.0 400 Bad Request":        netip.MustParseAddrPort("10.1.2.3:1"),
	}
	code := func(ans string) int { n, _ := strconv.Atoi(ans[8:11]); return n }
	for i := range 2000 { // more than one arena
		for ans, to := range answers {
			key := fmt.Sprintf("%s %d", ans, i)
			c.begin(key)
			c.finish(key, code(ans), []byte(fmt.Sprintf("%s\r\nX: %d\r\n\r\n", ans, i)), to)
		}
		if i == 1000 {
			c.rotate()
		}
	}
	if len(c.cur.arenas) < 2 || len(c.prev.arenas) < 2 {
		t.Fatalf("arenas: %d current, %d previous; want several", len(c.cur.arenas), len(c.prev.arenas))
	}
	for i := range 2000 {
		for ans, to := range answers {
			key := fmt.Sprintf("%s %d", ans, i)
			res, got, seen, _ := c.begin(key)
			want := fmt.Sprintf("%s\r\nX: %d\r\n\r\n", ans, i)
			if !seen || string(res) != want || got != to {
				t.Fatalf("%s: seen %t, %q to %s; want %q to %s", key, seen, res, got, want, to)
			}
		}
	}
	// The two challenged REGISTERs are being handled anew.
	if n := c.size(); n != 4*2000+2 {
		t.Fatalf("%d entries, want %d", n, 4*2000+2)
	}
}

// BenchmarkRegisterCacheHeap: the live heap the answer cache holds per
// registration (a challenged REGISTER and its authenticated retry answered
// 200, answers of a typical size) while the answers linger.
//
//	go test -run '^$' -bench RegisterCacheHeap -benchtime 1x ./sipcore/
func BenchmarkRegisterCacheHeap(b *testing.B) {
	const n = 100000
	challenge := []byte("SIP/2.0 401 Unauthorized\r\n" + strings.Repeat("x", 450))
	ok := []byte("SIP/2.0 200 OK\r\n" + strings.Repeat("y", 430))
	dst := netip.MustParseAddrPort("127.0.0.1:5060")
	keys := make([]string, 2*n)
	for i := range keys {
		keys[i] = fmt.Sprintf("z9hG4bK-%d-%016x__127.0.0.1:5060__REGISTER", i, uint64(i)*0x9e3779b97f4a7c15)
	}
	for range b.N {
		c := testRegisterCache(4 * n)
		before := liveHeap()
		for i := 0; i < len(keys); i += 2 {
			c.begin(keys[i])
			c.finish(keys[i], 401, bytes.Clone(challenge), dst)
			c.begin(keys[i+1])
			c.finish(keys[i+1], 200, bytes.Clone(ok), dst)
		}
		after := liveHeap()
		b.ReportMetric(float64(int64(after)-int64(before))/n, "B/registration")
		runtime.KeepAlive(c)
		if c.timer != nil {
			c.timer.Stop()
		}
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
