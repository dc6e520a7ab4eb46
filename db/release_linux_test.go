package db

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"pbx/sipcore/registrar"
)

// TestReleaseMapped: after bindings are written and read back (bbolt
// touches their pages through its map), ReleaseMapped takes the file's
// pages out of the process's resident set, and the data still reads back.
func TestReleaseMapped(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	now := time.Now().UTC().Truncate(time.Second)
	put := make([]registrar.Binding, 3000)
	for i := range put {
		put[i] = registrar.Binding{Tenant: "acme", Username: fmt.Sprintf("u%05d", i), Contact: fmt.Sprintf("sip:u%05d@10.0.0.1:5062", i),
			Source: netip.MustParseAddrPort("10.0.0.1:5062"), Transport: "udp", Expires: now.Add(time.Hour), CallID: "c", CSeq: 1}
	}
	if err := d.Registrations().SaveBindings(put, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Registrations().LoadBindings(); err != nil || len(got) != len(put) {
		t.Fatalf("load: %d bindings, %v", len(got), err)
	}
	path := filepath.Join(dir, FileName)
	before := mappedRssKB(t, path)
	if before < 64 {
		t.Fatalf("the database's mapping has %d kB resident after reading it; want some to release", before)
	}
	if err := d.ReleaseMapped(); err != nil {
		t.Fatal(err)
	}
	after := mappedRssKB(t, path)
	t.Logf("database mapping resident: %d kB before ReleaseMapped, %d kB after", before, after)
	if after > before/4 {
		t.Errorf("mapping resident %d kB before ReleaseMapped, %d kB after; want most released", before, after)
	}
	if got, err := d.Registrations().LoadBindings(); err != nil || len(got) != len(put) {
		t.Fatalf("load after release: %d bindings, %v", len(got), err)
	}
}

// mappedRssKB is the resident size of this process's mappings of path
// (/proc/self/smaps).
func mappedRssKB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		fields := strings.Fields(l)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[5] == path
			continue
		}
		if v, ok := strings.CutPrefix(l, "Rss:"); ok && in {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			total += n
		}
	}
	return total
}
