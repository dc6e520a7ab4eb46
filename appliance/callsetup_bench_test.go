package appliance

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore"
	"pbx/sipcore/siptest"
)

// phonePair is a caller and a callee that answers at once.
type phonePair struct {
	caller, callee *siptest.Phone
	to             string // the callee's extension
}

// startCallEnv runs the appliance with one tenant and 2*pairs accounts
// (extensions from 100), call records on or off, and registers every
// phone. It logs at info to nowhere, as a production appliance would log to
// a journal that is not the bottleneck.
func startCallEnv(tb testing.TB, records bool, pairs int) []phonePair {
	root := tb.TempDir()
	doc := fmt.Sprintf(`configVersion: pbx/v1
kind: System
spec:
  sip:
    bindHost: 127.0.0.1
    bindPort: %d
    transports: [udp]
  dataDir: %s
  cdr:
    enabled: %t
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: demo}
spec:
  domain: 127.0.0.1
`, freeUDPPort(tb), filepath.Join(root, "data"), records)
	for i := range 2 * pairs {
		doc += fmt.Sprintf("---\nconfigVersion: pbx/v1\nkind: Account\nmetadata: {name: u%d, tenant: demo}\nspec:\n  password: u%d-secret\n  extension: \"%d\"\n",
			i, i, 100+i)
	}
	cfg, rep := config.LoadBytes(root, "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		tb.Fatalf("config: %v", rep.Err())
	}
	log := slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := New(cfg, Options{}, log)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done; a.Close() })
	select {
	case <-a.SIP().Ready():
	case <-time.After(5 * time.Second):
		tb.Fatal("sip not ready")
	}
	var udp netip.AddrPort
	for _, l := range a.SIP().Listeners() {
		if l.Transport == sipcore.TransportUDP {
			udp, _ = a.SIP().Addr(l.ID)
		}
	}
	phone := func(user string) *siptest.Phone {
		p := siptest.NewPhone(tb, siptest.Options{Username: user, Password: user + "-secret", Domain: "127.0.0.1", PBX: udp})
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		p.MustRegister(rctx, 3600)
		return p
	}
	ps := make([]phonePair, pairs)
	for i := range ps {
		ps[i] = phonePair{caller: phone(fmt.Sprintf("u%d", 2*i)), callee: phone(fmt.Sprintf("u%d", 2*i+1)), to: fmt.Sprint(101 + 2*i)}
	}
	return ps
}

// call places one whole call from p's caller to its callee and returns
// its setup time: from the first INVITE leaving to the 200 arriving (the
// 407 round trip included).
func (p phonePair) call(b *testing.B) time.Duration {
	ctx := context.Background()
	t0 := time.Now()
	c := p.caller.Dial(ctx, p.to)
	in := <-p.callee.Incoming()
	<-c.Done()
	setup := time.Since(t0)
	if s, err := c.Final(); s != 200 {
		b.Errorf("final %d: %v", s, err)
		return setup
	}
	<-in.Answered()
	if err := c.Hangup(ctx); err != nil {
		b.Error(err)
		return setup
	}
	<-in.Ended()
	return setup
}

// discard is an io.Writer that drops everything (the handler still formats).
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkCallSetupRecords runs whole calls through the appliance: INVITE,
// 407, INVITE with digest, fork to the callee's registered phone that
// answers (media anchored: the PBX allocates a port pair per leg), ACK,
// BYE, with call records off and on, one call at a time and eight at once.
// It reports the CPU time of the process per call (the phones run in the
// same process, so this includes their share, the same in both), the
// allocations, and the setup time's p50 and p99 (INVITE to 200, the 407
// round trip and the in-flight marker included); the difference between
// on and off is what records cost: each records=on run reports it as
// records_cpu_%, its CPU per call over that of the records=off run just
// before it with the same concurrency, in percent (the target is at most
// 15). With -count the runs alternate off, on, off, on.
//
//	go test -run '^$' -bench CallSetupRecords -benchtime 2000x -count 3 ./appliance/
func BenchmarkCallSetupRecords(b *testing.B) {
	for _, conc := range []int{1, 8} {
		for _, records := range []bool{false, true} {
			name := fmt.Sprintf("conc=%d/records=off", conc)
			if records {
				name = fmt.Sprintf("conc=%d/records=on", conc)
			}
			b.Run(name, func(b *testing.B) { benchCalls(b, records, conc) })
		}
	}
}

// offCPU is the CPU per call of the last records=off run, by concurrency.
var offCPU = map[int]float64{}

func benchCalls(b *testing.B, records bool, conc int) {
	pairs := startCallEnv(b, records, conc)
	for _, p := range pairs {
		p.call(b) // warm up: first day directory, first dialog
	}
	b.ReportAllocs()
	b.ResetTimer()
	user, sys := cpuTime(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	setups := make([][]time.Duration, len(pairs))
	for i, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				setups[i] = append(setups[i], p.call(b))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Sorted(slices.Values(slices.Concat(setups...)))
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "setup_p50_ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "setup_p99_ms")
	user2, sys2 := cpuTime(b)
	cpu := float64((user2 - user + sys2 - sys).Microseconds()) / float64(b.N)
	b.ReportMetric(cpu, "cpu_us/call")
	if !records {
		offCPU[conc] = cpu
	} else if off := offCPU[conc]; off > 0 {
		b.ReportMetric(100*(cpu/off-1), "records_cpu_%")
	}
	b.ReportMetric(float64((sys2-sys).Microseconds())/float64(b.N), "sys_us/call")
}
