package appliance

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore"
)

var gcRounds = 1

// goMemory is what the Go runtime holds, read with runtime/metrics after a
// collection.
type goMemory struct {
	heap, stacks, goroutines uint64
}

func readGoMemory() goMemory {
	for range gcRounds {
		runtime.GC()
	}
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	return goMemory{heap: s[0].Value.Uint64(), stacks: s[1].Value.Uint64(), goroutines: s[2].Value.Uint64()}
}

// startHeldCallEnv runs the appliance with accounts alice (101) and bob
// (102) and a media range wide enough for calls held calls, and returns
// its UDP address.
func startHeldCallEnv(b *testing.B, calls int) netip.AddrPort {
	root := b.TempDir()
	doc := fmt.Sprintf(`configVersion: pbx/v1
kind: System
spec:
  sip:
    bindHost: 127.0.0.1
    bindPort: %d
    transports: [udp]
  media:
    rtpPortMin: 20000
    rtpPortMax: %d
  dataDir: %s
  cdr:
    enabled: false
---
configVersion: pbx/v1
kind: Tenant
metadata: {name: demo}
spec:
  domain: 127.0.0.1
---
configVersion: pbx/v1
kind: Account
metadata: {name: alice, tenant: demo}
spec: {password: alice-secret, extension: "101"}
---
configVersion: pbx/v1
kind: Account
metadata: {name: bob, tenant: demo}
spec: {password: bob-secret, extension: "102"}
`, freeUDPPort(b), 20000+8*calls+200, filepath.Join(root, "data"))
	cfg, rep := config.LoadBytes(root, "pbx.yaml", []byte(doc), config.Options{Getenv: func(string) string { return "" }})
	if !rep.OK() {
		b.Fatalf("config: %v", rep.Err())
	}
	log := slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := New(cfg, Options{}, log)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done; a.Close() })
	select {
	case <-a.SIP().Ready():
	case <-time.After(5 * time.Second):
		b.Fatal("sip not ready")
	}
	for _, l := range a.SIP().Listeners() {
		if l.Transport == sipcore.TransportUDP {
			addr, _ := a.SIP().Addr(l.ID)
			return addr
		}
	}
	b.Fatal("no udp listener")
	return netip.AddrPort{}
}

// BenchmarkHeldCallMemory holds PBX_HELD_CALLS (default 1,000) calls from
// alice to bob through the appliance in this process, SIPp playing both
// phones in its own (a 20 ms PCMA stream from the caller, echoed by the
// callee, so RTP flows both ways through the relay), and reports what the
// process holds per call once all are up, against before the first: live
// heap, goroutine stacks and goroutines (runtime/metrics after a
// collection), PBX_HELD_SETTLE (default 2s) after the last call is up (35s
// leaves out what the transactions of the setup keep: Timer L and M are
// 32 s). PBX_HELD_PROFILES names a directory for a heap profile
// (heap.prof, sampled every kB) and the goroutines (goroutine.txt) taken
// with the calls up. It needs sipp; b.N is ignored (one
// ladder per run).
//
//	go test -run '^$' -bench HeldCallMemory -benchtime 1x ./appliance/
func BenchmarkHeldCallMemory(b *testing.B) {
	sipp, err := exec.LookPath("sipp")
	if err != nil {
		b.Skip("sipp not installed")
	}
	profiles := os.Getenv("PBX_HELD_PROFILES")
	if profiles != "" {
		runtime.MemProfileRate = 1024
	}
	calls := 1000
	if v, err := strconv.Atoi(os.Getenv("PBX_HELD_GC")); err == nil && v > 0 {
		gcRounds = v
	}
	if v, err := strconv.Atoi(os.Getenv("PBX_HELD_CALLS")); err == nil && v > 0 {
		calls = v
	}
	addr := startHeldCallEnv(b, calls).String()
	testdata, err := filepath.Abs("e2e/testdata")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for _, u := range []string{"alice", "bob"} {
		line := fmt.Sprintf("SEQUENTIAL\n%s;127.0.0.1;[authentication username=%s password=%s-secret]\n", u, u, u)
		if err := os.WriteFile(filepath.Join(dir, u+".csv"), []byte(line), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []string{"register.xml", "uas_answer.xml", "bench_uac_hold.xml"} {
		data, err := os.ReadFile(filepath.Join(testdata, f))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	settle := 2 * time.Second
	if v, err := time.ParseDuration(os.Getenv("PBX_HELD_SETTLE")); err == nil && v > 0 {
		settle = v
	}
	rate := min(max(calls/5, 20), 200)
	hold := time.Duration(calls/rate)*time.Second + settle + 60*time.Second
	if err := writeHoldCapture(filepath.Join(dir, "hold.pcap"), int(hold/(20*time.Millisecond))); err != nil {
		b.Fatal(err)
	}
	bobPort := freeUDPPort(b)
	run := func(name string, wait bool, args ...string) *exec.Cmd {
		args = append([]string{addr, "-i", "127.0.0.1", "-t", "u1", "-trace_err", "-error_file", filepath.Join(dir, name+".err")}, args...)
		ctx, cancel := context.WithTimeout(context.Background(), hold+2*time.Minute)
		cmd := exec.CommandContext(ctx, sipp, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			cancel()
			b.Fatal(err)
		}
		if wait {
			defer cancel()
			if err := cmd.Wait(); err != nil {
				b.Fatalf("%s: %v\n%s", name, err, out.String())
			}
			return cmd
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); cancel() })
		return cmd
	}
	run("register", true, "-sf", "register.xml", "-inf", "bob.csv", "-m", "1", "-p", strconv.Itoa(bobPort))
	run("uas", false, "-sf", "uas_answer.xml", "-m", strconv.Itoa(calls), "-p", strconv.Itoa(bobPort),
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freeUDPPort(b)), "-rtp_echo")
	before := readGoMemory()
	stat := filepath.Join(dir, "uac.stat.csv")
	run("uac", false, "-sf", "bench_uac_hold.xml", "-inf", "alice.csv", "-s", "102", "-auth_uri", "102@"+addr,
		"-r", strconv.Itoa(rate), "-m", strconv.Itoa(calls), "-l", strconv.Itoa(calls), "-d", strconv.Itoa(int(hold/time.Millisecond)),
		"-p", strconv.Itoa(freeUDPPort(b)), "-mi", "127.0.0.1", "-mp", strconv.Itoa(freeUDPPort(b)),
		"-trace_stat", "-stf", stat, "-fd", "1")
	deadline := time.Now().Add(hold - 5*time.Second)
	for answered(stat) < calls {
		if time.Now().After(deadline) {
			errs, _ := os.ReadFile(filepath.Join(dir, "uac.err"))
			b.Fatalf("%d of %d calls up\n%s", answered(stat), calls, tailLines(string(errs), 10))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(settle) // every relay past its first packets
	up := readGoMemory()
	if profiles != "" {
		writeProfile(b, filepath.Join(profiles, "heap.prof"), "heap", 0)
		writeProfile(b, filepath.Join(profiles, "goroutine.txt"), "goroutine", 1)
	}
	n := float64(calls)
	b.ReportMetric((float64(up.heap)-float64(before.heap))/n, "heap_B/call")
	b.ReportMetric((float64(up.stacks)-float64(before.stacks))/n, "stack_B/call")
	b.ReportMetric((float64(up.goroutines)-float64(before.goroutines))/n, "goroutines/call")
	b.ReportMetric((float64(up.heap+up.stacks)-float64(before.heap+before.stacks))/n, "go_B/call")
}

func writeProfile(b *testing.B, path, name string, debug int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, debug); err != nil {
		b.Fatal(err)
	}
}

// answered is how many setups a SIPp statistics file has timed so far.
func answered(path string) int {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 {
		return 0
	}
	head, last := strings.Split(lines[0], ";"), strings.Split(lines[len(lines)-1], ";")
	total := 0
	for i, h := range head {
		if strings.HasPrefix(h, "ResponseTimeRepartitionsetup_") && i < len(last) {
			n, _ := strconv.Atoi(strings.TrimSpace(last[i]))
			total += n
		}
	}
	return total
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// writeHoldCapture writes a pcap of n PCMA RTP packets 20 ms apart for
// SIPp's play_pcap_audio (which rewrites the addresses).
func writeHoldCapture(path string, n int) error {
	var buf bytes.Buffer
	le, be := binary.LittleEndian, binary.BigEndian
	hdr := make([]byte, 24)
	le.PutUint32(hdr[0:], 0xa1b2c3d4)
	le.PutUint16(hdr[4:], 2)
	le.PutUint16(hdr[6:], 4)
	le.PutUint32(hdr[16:], 65535)
	le.PutUint32(hdr[20:], 1)
	buf.Write(hdr)
	for i := range n {
		rtp := make([]byte, 12+160)
		rtp[0], rtp[1] = 0x80, 8
		be.PutUint16(rtp[2:], uint16(1000+i))
		be.PutUint32(rtp[4:], uint32(160*i))
		be.PutUint32(rtp[8:], 0x5eed1234)
		for j := 12; j < len(rtp); j++ {
			rtp[j] = 0xd5
		}
		udp := make([]byte, 8, 8+len(rtp))
		be.PutUint16(udp[0:], 6000)
		be.PutUint16(udp[2:], 6002)
		be.PutUint16(udp[4:], uint16(8+len(rtp)))
		udp = append(udp, rtp...)
		ip := make([]byte, 20, 20+len(udp))
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		be.PutUint16(ip[2:], uint16(20+len(udp)))
		copy(ip[12:], []byte{127, 0, 0, 1})
		copy(ip[16:], []byte{127, 0, 0, 1})
		ip = append(ip, udp...)
		frame := append(make([]byte, 12), 0x08, 0x00)
		frame = append(frame, ip...)
		rec := make([]byte, 16)
		us := i * 20000
		le.PutUint32(rec[0:], uint32(us/1000000))
		le.PutUint32(rec[4:], uint32(us%1000000))
		le.PutUint32(rec[8:], uint32(len(frame)))
		le.PutUint32(rec[12:], uint32(len(frame)))
		buf.Write(rec)
		buf.Write(frame)
	}
	return os.WriteFile(path, buf.Bytes(), 0o600)
}
