package cdr

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

// The listing benchmarks run over a year of history: 1,000,000 calls over
// 365 days (about 2,740 a day) of one tenant. Listing reads only index
// files, so the data set is generated as index files directly, without the
// record files (writing a million record files would take minutes and
// gigabytes and would not change what List reads). Set
// PBX_BENCH_LIST_RECORDS to change the size.
//
// A rare number, +19998887777, appears in 12 calls spread over the year;
// +18885550000 in none.

const (
	benchDays       = 365
	benchRareNumber = "9998887777"
	benchNoNumber   = "8885550000"
)

var (
	benchOnce sync.Once
	benchDir  string
	benchEnd  = time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	benchErr  error
	benchGen  time.Duration
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func listBenchData(b *testing.B) string {
	benchOnce.Do(func() {
		t0 := time.Now()
		benchDir, benchErr = os.MkdirTemp("", "cdr-bench-")
		if benchErr != nil {
			return
		}
		benchErr = genIndexes(benchDir, "acme", envInt("PBX_BENCH_LIST_RECORDS", 1_000_000))
		benchGen = time.Since(t0)
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDir
}

func benchEntry(rng *rand.Rand, i, n int) Entry {
	// Spread evenly over benchDays, newest at benchEnd.
	span := time.Duration(benchDays) * 24 * time.Hour
	start := benchEnd.Add(-span + time.Duration(int64(span)/int64(n)*int64(i))).Truncate(time.Millisecond)
	from := fmt.Sprintf("+1555%07d", rng.IntN(10_000_000))
	if i%(n/12+1) == 7 {
		from = "+1" + benchRareNumber
	}
	e := Entry{
		ID:         NewID(start),
		Start:      start,
		Direction:  []calls.Direction{calls.DirectionInbound, calls.DirectionOutbound, calls.DirectionInternal}[rng.IntN(3)],
		From:       from,
		To:         fmt.Sprintf("+1666%07d", rng.IntN(10_000_000)),
		Trunk:      []string{"carrier-a", "carrier-b", ""}[rng.IntN(3)],
		Extension:  strconv.Itoa(100 + rng.IntN(50)),
		Answered:   rng.IntN(4) != 0,
		DurationMS: int64(rng.IntN(600_000)),
	}
	e.DID = e.To
	e.Cause = calls.CauseNoAnswer
	if e.Answered {
		e.Cause = calls.CauseAnswered
	}
	e.startMS = start.UnixMilli()
	return e
}

// genIndexes writes n index lines for tenant, a day file at a time.
func genIndexes(root, tenant string, n int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	var cur string
	var buf []byte
	flush := func() error {
		if cur == "" {
			return nil
		}
		if err := os.MkdirAll(cur, 0o750); err != nil {
			return err
		}
		err := os.WriteFile(filepath.Join(cur, IndexFile), buf, 0o640)
		buf = buf[:0]
		return err
	}
	for i := range n {
		e := benchEntry(rng, i, n)
		dir := filepath.Join(root, tenant, cdrDir, dateOf(e.Start).path())
		if dir != cur {
			if err := flush(); err != nil {
				return err
			}
			cur = dir
		}
		buf = e.AppendLine(buf)
	}
	return flush()
}

// benchList measures List for q: a cold pass (fresh store, nothing cached)
// is reported as cold_ms, then b.N warm runs with their p99.
func benchList(b *testing.B, q Query, pages int) {
	dir := listBenchData(b)
	s, err := New(Options{DataDir: dir, Location: func(string) *time.Location { return time.UTC }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Position the cursor `pages` pages deep.
	t0 := time.Now()
	for range pages {
		p, err := s.List(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		q.Cursor = p.NextCursor
	}
	p, err := s.List(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	cold := time.Since(t0)
	if q.Number == benchRareNumber && len(p.Records) == 0 {
		b.Fatal("rare number not found")
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		if _, err := s.List(ctx, q); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(cold.Milliseconds()), "cold_ms")
	b.ReportMetric(float64(len(p.Records)), "records")
}

func BenchmarkListFirstPage(b *testing.B) {
	month := benchEnd.AddDate(0, -1, 0)
	yes := true
	for _, tc := range []struct {
		name string
		q    Query
	}{
		{"all", Query{}},
		{"direction", Query{Direction: calls.DirectionOutbound}},
		{"answered_trunk", Query{Answered: &yes, Trunk: "carrier-b"}},
		{"extension", Query{Extension: "142"}},
		{"number_prefix", Query{Number: "+1555"}},
		{"number_rare", Query{Number: benchRareNumber}},
		{"number_absent", Query{Number: benchNoNumber}},
		{"last_month", Query{From: &month}},
	} {
		b.Run(tc.name, func(b *testing.B) { benchList(b, tc.q, 0) })
	}
}

// BenchmarkListPage measures page N of an unfiltered listing (100 a page):
// the cost must not grow with N.
func BenchmarkListPage(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("page=%d", n), func(b *testing.B) { benchList(b, Query{}, n) })
	}
}

// BenchmarkListWarmUp is the cost of summarising every day of a year
// (Store.Warm, run once at startup).
func BenchmarkListWarmUp(b *testing.B) {
	dir := listBenchData(b)
	b.ReportMetric(benchGen.Seconds(), "generate_s")
	for range b.N {
		s, _ := New(Options{DataDir: dir}, nil)
		if err := s.Warm(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommit measures committed records per second with fsync on the
// disk under os.TempDir (TMPDIR), with 1 and 16 calls ending at once, and
// how many directory fsyncs a commit costs (one alone; fewer when
// concurrent commits share one, dirsync.go).
func BenchmarkCommit(b *testing.B) {
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("concurrent=%d", par), func(b *testing.B) {
			s, err := New(Options{DataDir: b.TempDir(), Location: func(string) *time.Location { return time.UTC }}, nil)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			t0 := time.Now()
			cpu0 := cpuUsed(b)
			for range par {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						r := call("acme", start.Add(time.Duration(i)*time.Millisecond), i%2 == 0, "+15551230001", "+15559870002")
						if err := s.Commit(r); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "commits/s")
			b.ReportMetric(float64(s.dirSyncs.runs.Load())/float64(b.N), "dir_fsyncs/commit")
			b.ReportMetric(float64((cpuUsed(b)-cpu0).Microseconds())/float64(b.N), "cpu_us/commit")
		})
	}
}

// BenchmarkReindex rebuilds the indexes of PBX_BENCH_REINDEX_RECORDS record
// files (default 20,000) spread over 365 days. Set it to 1000000 for the
// full-size figure (about 4 GB of small files and several minutes to
// generate).
func BenchmarkReindex(b *testing.B) {
	n := envInt("PBX_BENCH_REINDEX_RECORDS", 20_000)
	dir := b.TempDir()
	s, err := New(Options{DataDir: dir, Location: func(string) *time.Location { return time.UTC }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	made := map[string]bool{}
	for i := range n {
		e := benchEntry(rng, i, n)
		r := call("acme", e.Start, e.Answered, e.From, e.To)
		r.ID = e.ID
		nr := r.normalize()
		data, _ := json.Marshal(&nr)
		d := s.dayDir("acme", nr.Start)
		if !made[d] {
			os.MkdirAll(d, 0o750)
			made[d] = true
		}
		if err := os.WriteFile(filepath.Join(d, string(nr.ID)+".json"), data, 0o640); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for d := range made {
			os.Remove(filepath.Join(d, IndexFile))
		}
		b.StartTimer()
		res, err := s.Reindex(context.Background(), ReindexOptions{})
		if err != nil || res.Records != n {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// cpuUsed is the process's user plus system CPU time so far.
func cpuUsed(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAnsweredCommit measures answered calls as the call log writes
// them: the in-flight marker at answer, the record at the end, one call at
// a time and 16 at once, in CPU per call (sys_us/call the kernel's part)
// and fdatasyncs and fsyncs per call (syncs/call: the commit journal's and
// the directories'). Each ended call's marker goes; a store that freed its
// inode every time made every later file creation on ext4 without a
// journal skip the inodes freed in the last minute, so the cost per call
// grew with the call rate (spare.go). PBX_BENCH_CDR_DIR sets the directory
// (a tmpfs shows the cost without the disk).
//
//	go test -run '^$' -bench AnsweredCommit -benchtime 2000x ./appliance/cdr/
//
// mode=then commits as the call log does, with CommitThen (the commit
// finished on the store's committer, paced by commitPace); mode=sync with
// Commit, each waiting for its own.
func BenchmarkAnsweredCommit(b *testing.B) {
	for _, mode := range []string{"sync", "then"} {
		for _, conc := range []int{1, 16} {
			b.Run(fmt.Sprintf("mode=%s/conc=%d", mode, conc), func(b *testing.B) { benchAnsweredCommit(b, conc, mode == "then") })
		}
	}
}

func benchAnsweredCommit(b *testing.B, conc int, then bool) {
	dir := b.TempDir()
	if d := os.Getenv("PBX_BENCH_CDR_DIR"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "cdr-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	s, err := New(Options{DataDir: dir, Location: func(string) *time.Location { return time.UTC }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	commit(b, s, call("acme", start, true, "+15551230001", "+15559870002")) // the day directory and the journal
	syncs := func() int64 {
		n := s.dirSyncs.runs.Load()
		if j := s.journal.Load(); j != nil {
			n += j.syncs.Load()
		}
		return n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	syncs0 := syncs()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				r := call("acme", start.Add(time.Duration(i)*time.Millisecond), true, "+15551230001", "+15559870002")
				if err := s.Answered(r); err != nil {
					b.Error(err)
					return
				}
				if then {
					s.CommitThen(r, func(err error) {
						if err != nil {
							b.Error(err)
						}
					})
					continue
				}
				if err := s.Commit(r); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s.Flush()
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	user := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano())
	sys := time.Duration(ru1.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64((user+sys).Microseconds())/float64(b.N), "cpu_us/call")
	b.ReportMetric(float64(sys.Microseconds())/float64(b.N), "sys_us/call")
	b.ReportMetric(float64(syncs()-syncs0)/float64(b.N), "syncs/call")
}

// BenchmarkAnsweredCommitPaced measures answered calls as the call log
// writes them at a steady rate, as in the end-to-end call setup benchmark
// (BenchmarkSIPpCallSetup at 500 calls/s with 1 s calls): a call answered
// every 2 ms, each committed with CommitThen 1 s after its answer, so
// that about 500 markers are in flight and the committer's batches
// (commitPace) hold about 25 records, not the hundreds of a run flat out
// (BenchmarkAnsweredCommit), which hides what a batch costs (the journal's
// write and fdatasync, the index lines). Reports CPU per call (sys_us/call
// the kernel's part) and syncs per call. store=off runs the same loop,
// records built and held, without the store: the pacing's own cost (a
// sleep and a wake-up a call), to subtract. PBX_BENCH_CDR_MAXOPEN sets
// Options.MaxOpenFiles: the pbx under an open file limit of 20,000 (the
// end-to-end benchmarks' here) holds 625 marker files (312 until the
// share grew to half: fewer than the 500 calls in flight, so some markers
// were opened again by path; 312 shows that case).
//
//	go test -run '^$' -bench AnsweredCommitPaced -benchtime 3000x -count 2 ./appliance/cdr/
func BenchmarkAnsweredCommitPaced(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("store=%s", map[bool]string{true: "on", false: "off"}[on]), func(b *testing.B) { benchAnsweredCommitPaced(b, on) })
	}
}

func benchAnsweredCommitPaced(b *testing.B, on bool) {
	const every, hold = 2 * time.Millisecond, time.Second
	maxOpen, _ := strconv.Atoi(os.Getenv("PBX_BENCH_CDR_MAXOPEN"))
	s, err := New(Options{DataDir: b.TempDir(), Location: func(string) *time.Location { return time.UTC }, MaxOpenFiles: maxOpen}, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	commit(b, s, call("acme", start, true, "+15551230001", "+15559870002")) // the day directory and the journal
	answered, commitThen := s.Answered, s.CommitThen
	if !on {
		answered = func(*Record) error { return nil }
		commitThen = func(_ *Record, done func(error)) { done(nil) }
	}
	type held struct {
		r   *Record
		end time.Time
	}
	var fifo []held
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuUsed(b)
	var sys0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &sys0)
	syncs0 := s.journal.Load().syncs.Load()
	t0 := time.Now()
	for i := range b.N {
		time.Sleep(time.Until(t0.Add(time.Duration(i) * every)))
		r := call("acme", start.Add(time.Duration(i+1)*time.Millisecond), true, "+15551230001", "+15559870002")
		if err := answered(r); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		fifo = append(fifo, held{r, now.Add(hold)})
		for len(fifo) > 0 && !fifo[0].end.After(now) {
			commitThen(fifo[0].r, done)
			fifo = fifo[1:]
		}
	}
	for _, h := range fifo {
		time.Sleep(time.Until(h.end))
		commitThen(h.r, done)
	}
	s.Flush()
	b.StopTimer()
	cpu := cpuUsed(b) - cpu0
	var sys1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &sys1)
	sys := time.Duration(sys1.Stime.Nano() - sys0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu_us/call")
	b.ReportMetric(float64(sys.Microseconds())/float64(b.N), "sys_us/call")
	b.ReportMetric(float64(s.journal.Load().syncs.Load()-syncs0)/float64(b.N), "syncs/call")
}

// BenchmarkSpareCreate measures the CPU time of creating the spare files
// that record files are written into (one a call), in a store whose data
// directory is made right after another store's, which had created as
// many, was removed: a pbx started on a new data directory, or the next
// run of a benchmark. On ext4 without a journal (the reference machine) a
// creation skips every inode freed in the last minute in the block group
// it looks in; stock directories placed by the same name in every run
// looked in the group the removal had just freed, at 120-200 us a file
// instead of about 7 (spare.go, stockDir). PBX_BENCH_CDR_DIR sets where
// (default TMPDIR).
//
//	go test -run '^$' -bench SpareCreate -benchtime 4000x -count 2 ./appliance/cdr/
func BenchmarkSpareCreate(b *testing.B) {
	base := os.Getenv("PBX_BENCH_CDR_DIR")
	run := func() time.Duration {
		dir, err := os.MkdirTemp(base, "cdr-spares-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := New(Options{DataDir: dir}, nil)
		if err != nil {
			b.Fatal(err)
		}
		inflight, day := s.inflightDir("acme"), filepath.Join(dir, "acme", cdrDir, "2026", "11", "24")
		for _, d := range []string{inflight, day} {
			if err := ensureDir(d); err != nil {
				b.Fatal(err)
			}
		}
		var spent time.Duration
		for made := 0; made < b.N; {
			cpu0 := cpuUsed(b)
			s.spares.refill(inflight, min(b.N-made, spareStock))
			spent += cpuUsed(b) - cpu0
			for f, ok := s.spares.takeFresh(inflight); ok; f, ok = s.spares.takeFresh(inflight) {
				// Used as a record file is: renamed into its day.
				syscall.Close(f.fd)
				if err := os.Rename(f.path, filepath.Join(day, strconv.Itoa(made)+recordExt)); err != nil {
					b.Fatal(err)
				}
				made++
			}
		}
		return spent
	}
	b.StopTimer()
	run() // the earlier data directory, removed
	b.StartTimer()
	spent := run()
	b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "cpu_us/spare")
}

// BenchmarkPutRecord measures a record file's write as a commit makes it
// (putRecord: a new spare written and renamed into its day directory,
// then closed), the spares made outside the timer, in a data directory
// as deep as the pbx's (the end-to-end benchmarks'). dir=held renames
// into the day directory held open (dirTarget), as commits do;
// dir=path names it by its whole path, as they did: the kernel walked
// it for every record.
//
//	go test -run '^$' -bench PutRecord -benchtime 4000x -count 3 ./appliance/cdr/
func BenchmarkPutRecord(b *testing.B) {
	for _, held := range []bool{true, false} {
		b.Run(map[bool]string{true: "dir=held", false: "dir=path"}[held], func(b *testing.B) { benchPutRecord(b, held) })
	}
}

func benchPutRecord(b *testing.B, held bool) {
	root := filepath.Join(b.TempDir(), "BenchmarkSIPpCallSetuprecords=on", "001", "data")
	s, err := New(Options{DataDir: root}, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	inflight, day := s.inflightDir("acme"), s.dayDir("acme", start)
	for _, d := range []string{inflight, day} {
		if err := ensureDir(d); err != nil {
			b.Fatal(err)
		}
	}
	r := call("acme", start, true, "+15551230001", "+15559870002").normalize()
	data, err := appendRecord(nil, &r)
	if err != nil {
		b.Fatal(err)
	}
	var to *dirTarget
	if held {
		to = s.dirSyncs.target(day)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, spent := cpuUsed(b), time.Duration(0)
	for i := range b.N {
		if i%spareStock == 0 {
			spent += cpuUsed(b) - cpu0
			s.spares.refill(inflight, spareStock)
			cpu0 = cpuUsed(b)
		}
		path := inDir(day, NewID(start.Add(time.Duration(i)*time.Millisecond)), recordExt)
		if ok, err := s.spares.putRecord(inflight, path, data, to); !ok || err != nil {
			b.Fatalf("record %d: %v %v", i, ok, err)
		}
	}
	spent += cpuUsed(b) - cpu0
	b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N)/1000, "cpu_us/record")
}
