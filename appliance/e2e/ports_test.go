package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFreePortRangeReserves: a range freePortRange handed out is not handed
// out again while the test that took it runs, although its ports are not
// bound yet (a PBX binds its RTP ports only when a call starts), and is
// released once that test has ended.
func TestFreePortRangeReserves(t *testing.T) {
	var first int
	t.Run("holder", func(t *testing.T) {
		first = freePortRange(t, 150) // two blocks
		for range 3 {
			if b := freePortRange(t, 150); b < first+200 && first < b+200 {
				t.Fatalf("ranges from %d and %d overlap while both are held", first, b)
			}
		}
	})
	locks := lockPortBlocks(filepath.Join(os.TempDir(), "pbx-e2e-ports"), first, 2)
	if locks == nil {
		t.Fatalf("the blocks from %d are still locked after the holder ended", first)
	}
	closeAll(locks)
}
