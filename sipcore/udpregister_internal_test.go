package sipcore

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestRegisterCacheDropsOldAnswersBeforeShedding: when the cache is full
// and part of it is the older generation (answers kept at least one
// linger), a new REGISTER gets room by dropping that generation early; only
// a cache full of the current generation sheds.
func TestRegisterCacheDropsOldAnswersBeforeShedding(t *testing.T) {
	c := &registerCache{max: 4, linger: time.Hour, cur: map[string]*cachedResponse{}}
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
		c.finish(key, []byte("SIP/2.0 200 OK"), dst)
	}
	c.rotate() // the three answers are now the older generation
	if _, _, seen, full := c.begin("new0"); seen || full {
		t.Fatalf("new0 with room: seen %t, full %t", seen, full)
	}
	if res, _, seen, _ := c.begin("old1"); !seen || string(res) != "SIP/2.0 200 OK" {
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
