package cdr

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJournalRestoresRecordsLostByPowerCut: a committed record's file is
// not fsynced on its own, so a power cut may lose it, tear it, lose its
// index line and bring its removed marker back; the next start writes the
// records again from the commit journal, drops the marker, adds the index
// lines, and a second start finds nothing to do.
func TestJournalRestoresRecordsLostByPowerCut(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	lost := call("acme", start, true, "+15551230001", "100")
	torn := call("acme", start.Add(time.Minute), false, "+15551230002", "100")
	kept := call("acme", start.Add(2*time.Minute), false, "+15551230003", "100")
	if err := s.Answered(lost); err != nil {
		t.Fatal(err)
	}
	marker, err := os.ReadFile(s.MarkerPath("acme", lost.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Record{lost, torn, kept} {
		commit(t, s, r)
	}
	if s.journal.Load() == nil {
		t.Fatal("commits did not go through the journal")
	}
	if n := s.journal.Load().gathers.Load(); n != 0 {
		t.Fatalf("commits one after another waited %d times for others", n)
	}
	// The power cut.
	day := s.dayDir("acme", start)
	lostPath := filepath.Join(day, string(lost.ID)+recordExt)
	tornPath := filepath.Join(day, string(torn.ID)+recordExt)
	if err := os.Remove(lostPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(tornPath, 40); err != nil {
		t.Fatal(err)
	}
	var keep []byte
	for _, l := range strings.SplitAfter(string(mustRead(t, filepath.Join(day, IndexFile))), "\n") {
		if strings.Contains(l, string(kept.ID)) {
			keep = append(keep, l...)
		}
	}
	if err := os.WriteFile(filepath.Join(day, IndexFile), keep, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.MarkerPath("acme", lost.ID), marker, 0o640); err != nil {
		t.Fatal(err)
	}

	s2 := newTestStore(t, nil, func(o *Options) { o.DataDir = s.opts.DataDir })
	dry, err := s2.Repair(context.Background(), RepairOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := countKind(dry, ActRestored); n != 2 {
		t.Fatalf("dry run: %d restored, want 2: %v", n, dry)
	}
	if _, err := os.Stat(lostPath); !os.IsNotExist(err) {
		t.Fatalf("dry run wrote the record: %v", err)
	}
	acts, err := s2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if countKind(acts, ActRestored) != 2 || countKind(acts, ActMarkerDropped) != 1 || countKind(acts, ActPromoted) != 0 ||
		countKind(acts, ActIndexLineAdded) != 2 {
		t.Fatalf("recovery: %v", acts)
	}
	for _, r := range []*Record{lost, torn, kept} {
		committedOnce(t, s2, r)
	}
	// New commits go through the emptied journal; the next start replays
	// only them, and finds their files whole.
	next := call("acme", start.Add(3*time.Minute), false, "+15551230004", "100")
	commit(t, s2, next)
	s3 := newTestStore(t, nil, func(o *Options) { o.DataDir = s.opts.DataDir })
	if acts, err := s3.Recover(context.Background()); err != nil || len(acts) != 0 {
		t.Fatalf("second recovery: %v %v", acts, err)
	}
	entries, err := readJournal(s3.journalPath())
	if err != nil || len(entries) != 1 || !strings.HasSuffix(entries[0].rel, string(next.ID)+recordExt) {
		t.Fatalf("journal after a restart and one commit: %d entries, %v", len(entries), err)
	}
}

// TestJournalSkipsDaysPastRetention: an entry of a day the retention has
// removed is not written back.
func TestJournalSkipsDaysPastRetention(t *testing.T) {
	now := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	s := newTestStore(t, nil, func(o *Options) { o.Retention = 48 * time.Hour; o.Now = func() time.Time { return now } })
	old := call("acme", now.Add(-24*time.Hour), false, "+15551230001", "100")
	commit(t, s, old)
	now = now.Add(72 * time.Hour)
	if _, err := s.Sweep(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, nil, func(o *Options) {
		o.DataDir = s.opts.DataDir
		o.Retention = 48 * time.Hour
		o.Now = func() time.Time { return now }
	})
	acts, err := s2.Recover(context.Background())
	if err != nil || countKind(acts, ActRestored) != 0 {
		t.Fatalf("recovery: %v %v", acts, err)
	}
	if _, err := os.Stat(s.dayDir("acme", old.Start)); !os.IsNotExist(err) {
		t.Fatalf("removed day came back: %v", err)
	}
}

// TestJournalTornAndStaleEntries: reading stops at a torn entry and at an
// entry of another epoch (left by an earlier use of the half).
func TestJournalTornAndStaleEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), journalName)
	j, err := openJournal(path, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	j.epoch = 7
	var offs []int64
	for i := range 3 {
		offs = append(offs, j.off)
		if err := jcommit(j, "a/cdr/2026/11/21/x.json", []byte(strings.Repeat("r", 10+i))); err != nil {
			t.Fatal(err)
		}
	}
	if es, _ := readJournal(path); len(es) != 3 || string(es[2].data) != "rrrrrrrrrrrr" {
		t.Fatalf("read %d entries", len(es))
	}
	// An entry of an older epoch after them is not read.
	stale := encodeEntry(6, "a/cdr/2026/11/21/y.json", []byte("old"))
	if _, err := j.f.WriteAt(stale, j.off); err != nil {
		t.Fatal(err)
	}
	if es, _ := readJournal(path); len(es) != 3 {
		t.Fatalf("read %d entries with a stale one after them, want 3", len(es))
	}
	// A torn last entry ends the read.
	if _, err := j.f.WriteAt([]byte{'X'}, offs[2]+journalHeader+3); err != nil {
		t.Fatal(err)
	}
	if es, _ := readJournal(path); len(es) != 2 {
		t.Fatalf("read %d entries with the last torn, want 2", len(es))
	}
	// A length past the end of the half is torn too.
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], journalHalf)
	if _, err := j.f.WriteAt(b[:], offs[1]); err != nil {
		t.Fatal(err)
	}
	if es, _ := readJournal(path); len(es) != 1 {
		t.Fatalf("read %d entries with a bad length, want 1", len(es))
	}
}

// TestJournalSwitchesHalves: a full half hands over to the other, whose
// entries the checkpoint must cover first (the writer forces one when it
// has not); entries of both halves are read back.
func TestJournalSwitchesHalves(t *testing.T) {
	path := filepath.Join(t.TempDir(), journalName)
	flushes := 0
	j, err := openJournal(path, func() error { flushes++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	data := []byte(strings.Repeat("r", journalHalf/8))
	each := journalHalf / (len(data) + 64)
	for range each + 1 { // one past a half
		if err := jcommit(j, "a/cdr/2026/11/21/x.json", data); err != nil {
			t.Fatal(err)
		}
	}
	if flushes != 0 || j.half != journalHalf {
		t.Fatalf("after filling the first half: %d flushes, writing half at %d", flushes, j.half)
	}
	if es, _ := readJournal(path); len(es) != each+1 {
		t.Fatalf("read %d entries, want %d", len(es), each+1)
	}
	for range each { // fills the second half: the first is not checkpointed
		if err := jcommit(j, "a/cdr/2026/11/21/x.json", data); err != nil {
			t.Fatal(err)
		}
	}
	if flushes != 1 || j.half != 0 {
		t.Fatalf("after filling the second half: %d flushes, writing half at %d", flushes, j.half)
	}
	j.checkpointed(j.seq.Load())
	for range each {
		if err := jcommit(j, "a/cdr/2026/11/21/x.json", data); err != nil {
			t.Fatal(err)
		}
	}
	if flushes != 1 {
		t.Fatalf("a checkpointed half was flushed again: %d flushes", flushes)
	}
	if !j.dirty() {
		t.Fatal("entries after the checkpoint not reported dirty")
	}
}

// jcommit is a commit as the store makes it: begun, then committed.
func jcommit(j *journal, rel string, data []byte) error {
	j.begin()
	return j.commit(rel, data)
}

func countKind(acts []Action, k ActionKind) int {
	n := 0
	for _, a := range acts {
		if a.Kind == k {
			n++
		}
	}
	return n
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTornRecordOfInterruptedCommitYieldsToMarker: a power cut during a
// commit, before the journal's fdatasync, can leave the record file renamed
// into place but torn, with no journal entry; the call's marker is then
// promoted over it instead of being dropped as committed.
func TestTornRecordOfInterruptedCommitYieldsToMarker(t *testing.T) {
	s := newTestStore(t, nil, nil)
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	r := call("acme", start, true, "+15551230001", "100")
	if err := s.Answered(r); err != nil {
		t.Fatal(err)
	}
	day := s.dayDir("acme", start)
	if err := os.MkdirAll(day, 0o750); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(day, string(r.ID)+recordExt)
	if err := os.WriteFile(final, []byte(`{"id":"`+string(r.ID)+`","ten`), 0o640); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, nil, func(o *Options) { o.DataDir = s.opts.DataDir })
	acts, err := s2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if countKind(acts, ActPromoted) != 1 || countKind(acts, ActTmpRemoved) != 1 || countKind(acts, ActMarkerDropped) != 0 {
		t.Fatalf("recovery: %v", acts)
	}
	got, err := s2.Get(context.Background(), "acme", r.ID)
	if err != nil || !got.Incomplete || got.From != r.From {
		t.Fatalf("record after recovery: %v %+v", err, got)
	}
}

// TestJournalWritesStagedEntriesAtSync: added entries are staged, not
// written, until a sync writes them all (across a half's end too, the
// writer moving to the other half), stamped with their half's epoch; a
// write that fails leaves them staged for the next sync.
func TestJournalWritesStagedEntriesAtSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), journalName)
	j, err := openJournal(path, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.close() }()
	add := func(data string) uint64 {
		t.Helper()
		j.begin()
		seq, err := j.add("a/cdr/2026/11/21/x.json", []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	var last uint64
	for i := range 5 {
		last = add(strings.Repeat("r", 10+i))
	}
	if es, _ := readJournal(path); len(es) != 0 {
		t.Fatalf("%d entries written before a sync", len(es))
	}
	// The write fails (the file is closed): the entries stay staged.
	j.f.Close()
	if err := j.sync(last); err == nil {
		t.Fatal("sync with the journal closed succeeded")
	}
	if j.f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
		t.Fatal(err)
	}
	if err := j.sync(last); err != nil {
		t.Fatal(err)
	}
	es, _ := readJournal(path)
	if len(es) != 5 || string(es[4].data) != "rrrrrrrrrrrrrr" || len(j.staged) != 0 {
		t.Fatalf("after the sync: %d entries written, %d bytes staged", len(es), len(j.staged))
	}
	// Entries past the first half's end: one sync writes the rest of the
	// first half and moves to the second.
	data := strings.Repeat("r", journalHalf/8)
	for range journalHalf / len(data) {
		last = add(data)
	}
	if err := j.sync(last); err != nil {
		t.Fatal(err)
	}
	if j.half != journalHalf || j.epoch != 2 {
		t.Fatalf("writing half at %d, epoch %d; want the second half, epoch 2", j.half, j.epoch)
	}
	es, _ = readJournal(path)
	if n := 5 + journalHalf/len(data); len(es) != n {
		t.Fatalf("read %d entries, want %d", len(es), n)
	}
	// Seven of the eight large entries fit after the five small ones.
	if j.last != [2]uint64{last - 1, last} {
		t.Fatalf("last entries of the halves %v, last added %d", j.last, last)
	}
}
