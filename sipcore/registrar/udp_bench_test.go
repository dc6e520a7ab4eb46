package registrar_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pbx/sipcore/registrar"
)

// benchAccounts is how many accounts the loopback benchmarks register.
const benchAccounts = 1000

var nonceRE = regexp.MustCompile(`nonce="([^"]+)"`)

// udpRegisterClient is one phone-like sender: its own socket and its own
// nonce, whose count it raises with every REGISTER, one at a time.
type udpRegisterClient struct {
	c     *net.UDPConn
	pbx   netip.AddrPort
	nonce string
	nc    uint32 // last nonce count used
	buf   []byte
}

func newUDPRegisterClient(b *testing.B, pbx netip.AddrPort) *udpRegisterClient {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	u := &udpRegisterClient{c: c, pbx: pbx, buf: make([]byte, 8192)}
	res := u.roundTrip(b, u.message("u0", 0, "challenge", ""))
	m := nonceRE.FindStringSubmatch(res)
	if m == nil || !strings.HasPrefix(res, "SIP/2.0 401 ") {
		b.Fatalf("challenge: %s", res)
	}
	u.nonce = m[1]
	return u
}

// message is a REGISTER from user; auth adds credentials with nonce count nc.
func (u *udpRegisterClient) message(user string, nc uint32, id, nonce string) []byte {
	laddr := u.c.LocalAddr().String()
	auth := ""
	uri := "sip:" + domain
	if nonce != "" {
		resp, _ := registrar.DigestResponse("MD5", user, domain, user+"-pw", "REGISTER", uri, nonce, "auth", nc, "cn")
		auth = fmt.Sprintf("Authorization: Digest username=\"%s\", realm=\"%s\", nonce=\"%s\", uri=\"%s\", response=\"%s\", algorithm=MD5, cnonce=\"cn\", qop=auth, nc=%08x\r\n",
			user, domain, nonce, uri, resp, nc)
	}
	return []byte(fmt.Sprintf("REGISTER %s SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;rport;branch=z9hG4bK-%s\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:%s@%s>;tag=%s\r\n"+
		"To: <sip:%s@%s>\r\n"+
		"Call-ID: %s@bench\r\n"+
		"CSeq: %d REGISTER\r\n"+
		"Contact: <sip:%s@%s;transport=udp>\r\n"+
		"Expires: 600\r\n"+
		"User-Agent: bench\r\n"+
		"%s"+
		"Content-Length: 0\r\n\r\n",
		uri, laddr, id, user, domain, id, user, domain, user, nc+1, user, laddr, auth))
}

func (u *udpRegisterClient) roundTrip(b *testing.B, msg []byte) string {
	if _, err := u.c.WriteToUDPAddrPort(msg, u.pbx); err != nil {
		b.Fatal(err)
	}
	if err := u.c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		b.Fatal(err)
	}
	n, err := u.c.Read(u.buf)
	if err != nil {
		b.Fatalf("no answer: %v", err)
	}
	return string(u.buf[:n])
}

// registerEnv is a UDP registrar serving benchAccounts accounts.
func registerEnv(b *testing.B) *env {
	e := newEnv(b, nil)
	for i := range benchAccounts {
		u := fmt.Sprintf("u%d", i)
		e.dir.AddAccount(domain, registrar.Account{Username: u, Password: u + "-pw", Extension: fmt.Sprintf("%d", 1000+i)})
	}
	return e
}

// sendRegisters has clients (a number dividing benchAccounts, so that each
// account's Call-ID stays with one client and its CSeq rises) send n authenticated REGISTERs between them
// (messages built before the timer starts) and checks every answer is 200.
// It returns the CPU time the process used while they were sent.
func sendRegisters(b *testing.B, clients []*udpRegisterClient, n int, tag string) time.Duration {
	msgs := make([][][]byte, len(clients))
	for i := range n {
		k := i % len(clients)
		clients[k].nc++
		nc := clients[k].nc
		user := fmt.Sprintf("u%d", i%benchAccounts)
		msgs[k] = append(msgs[k], clients[k].message(user, nc, fmt.Sprintf("%s-%d", tag, i), clients[k].nonce))
	}
	b.ResetTimer()
	cpu := processCPU()
	var wg sync.WaitGroup
	for k, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range msgs[k] {
				if res := c.roundTrip(b, m); !strings.HasPrefix(res, "SIP/2.0 200 ") {
					b.Errorf("answer: %s", res)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	return processCPU() - cpu
}

// BenchmarkUDPRegister drives authenticated REGISTERs (MD5, qop=auth) over
// loopback UDP through the SIP core and the registrar, 8 senders each with
// one request outstanding: what a REGISTER costs the process end to end
// (read, parse, transaction, digest, binding, 200, write). The client's work
// (building messages, reading answers) is in the same process, so compare
// runs with each other rather than with the per-process figures.
// allocs/op shows a regression: 63 (112 before the answers were built
// without copying the request's headers and the key, contact and digest
// uri texts in one allocation each, and the REGISTER parsed from one copy).
func BenchmarkUDPRegister(b *testing.B) {
	e := registerEnv(b)
	clients := make([]*udpRegisterClient, 8)
	for i := range clients {
		clients[i] = newUDPRegisterClient(b, e.udp)
	}
	b.ReportAllocs()
	cpu := sendRegisters(b, clients, b.N, fmt.Sprintf("r%d", b.N))
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time (user and system) the process has used: the
// figure to compare, since wall time per REGISTER depends on what else the
// machine runs. It includes the senders' share.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUDPRegisterRetainedHeap measures the live heap each answered
// REGISTER keeps while it lingers to absorb retransmissions (a completed
// sipgo transaction in Timer J before, a cached answer now): 5,000
// REGISTERs, then a collection, all before any of them ends.
func BenchmarkUDPRegisterRetainedHeap(b *testing.B) {
	const n = 5000
	for range b.N {
		b.StopTimer()
		e := registerEnv(b)
		clients := make([]*udpRegisterClient, 4)
		for i := range clients {
			clients[i] = newUDPRegisterClient(b, e.udp)
		}
		// Warm the bindings so the second round only refreshes them.
		sendRegisters(b, clients, benchAccounts, "warm")
		deadline := time.Now().Add(30 * time.Second)
		for st := e.srv.Stats(); st.OpenTransactions+st.CachedRegisters > 0; st = e.srv.Stats() {
			if time.Now().After(deadline) {
				b.Fatalf("%d transactions still open, %d answers cached", st.OpenTransactions, st.CachedRegisters)
			}
			time.Sleep(50 * time.Millisecond)
		}
		before := registrar.LiveHeap()
		start := time.Now()
		sendRegisters(b, clients, n, "mem")
		after := registrar.LiveHeap()
		if st := e.srv.Stats(); st.OpenTransactions+st.CachedRegisters < n/2 {
			open := st.OpenTransactions + st.CachedRegisters
			b.Fatalf("only %d transactions open after %s: measure while they linger", open, time.Since(start))
		}
		if path := os.Getenv("PBX_LINGER_HEAP_PROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		per := float64(int64(after)-int64(before)) / n
		b.ReportMetric(per, "B/tx")
		b.Logf("%d transactions: live heap %d -> %d bytes, %.0f B each", n, before, after, per)
	}
}

// writeHeapProfile writes the live heap to path (set
// PBX_LINGER_HEAP_PROFILE to see what lingering transactions hold).
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkUDPRegisterMemoryReturn drives a bounded burst of authenticated
// REGISTERs (PBX_RETURN_REGISTERS, default 60,000, from 16 senders) through
// the SIP core and the registrar, then watches the process's resident size
// (VmRSS) for 30 s: it reports the idle size before the burst, the peak
// during it, the size 30 s after it ended and how long it took to come back
// within 20% of idle (-1: not within 30 s). The senders run in the same
// process; their share is small and the same on every run.
//
//	go test -run '^$' -bench UDPRegisterMemoryReturn -benchtime 1x ./sipcore/registrar/
func BenchmarkUDPRegisterMemoryReturn(b *testing.B) {
	n := 60000
	if v, err := strconv.Atoi(os.Getenv("PBX_RETURN_REGISTERS")); err == nil && v > 0 {
		n = v
	}
	for range b.N {
		b.StopTimer()
		e := registerEnv(b)
		clients := make([]*udpRegisterClient, 16)
		for i := range clients {
			clients[i] = newUDPRegisterClient(b, e.udp)
		}
		sendRegisters(b, clients, benchAccounts, "warm")
		waitNoTransactions(b, e)
		idle := vmRSS(b)
		peak := idle
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					peak = max(peak, vmRSS(b))
				}
			}
		}()
		start := time.Now()
		streamRegisters(b, clients, n, fmt.Sprintf("load%d", time.Now().UnixNano()))
		loaded := time.Since(start)
		close(stop)
		<-sampled
		peak = max(peak, vmRSS(b))
		end := time.Now()
		back := time.Duration(-1)
		var rss uint64
		for time.Since(end) < 30*time.Second {
			time.Sleep(250 * time.Millisecond)
			rss = vmRSS(b)
			if back < 0 && float64(rss) <= 1.2*float64(idle) {
				back = time.Since(end)
			}
		}
		if path := os.Getenv("PBX_RETURN_HEAP_PROFILE"); path != "" {
			writeHeapProfile(b, path)
			b.Logf("runtime after: %s", runtimeMemory())
		}
		const mb = 1 << 20
		b.ReportMetric(float64(n)/loaded.Seconds(), "registers/s")
		b.ReportMetric(float64(idle)/mb, "rss_idle_MB")
		b.ReportMetric(float64(peak)/mb, "rss_peak_MB")
		b.ReportMetric(float64(rss)/mb, "rss_30s_MB")
		b.ReportMetric(back.Seconds(), "back_within_20%_s")
		b.Logf("%d REGISTERs in %s: RSS idle %d MB, peak %d MB, %d MB 30 s after; within 20%% of idle after %s",
			n, loaded.Round(time.Millisecond), idle/mb, peak/mb, rss/mb, back)
	}
}

// streamRegisters has clients send n authenticated REGISTERs between them,
// one outstanding each, built as they go (a prebuilt burst would weigh on
// the resident size measured).
func streamRegisters(b *testing.B, clients []*udpRegisterClient, n int, tag string) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for k, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; ; i += len(clients) {
				if next.Add(1) > int64(n) {
					return
				}
				c.nc++
				msg := c.message(fmt.Sprintf("u%d", i%benchAccounts), c.nc, fmt.Sprintf("%s-%d", tag, i), c.nonce)
				if res := c.roundTrip(b, msg); !strings.HasPrefix(res, "SIP/2.0 200 ") {
					b.Errorf("answer: %.80s", res)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// runtimeMemory summarises what the Go runtime holds, for a log line.
func runtimeMemory() string {
	names := []string{
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/free:bytes",
		"/memory/classes/heap/released:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/stacks:bytes",
		"/memory/classes/os-stacks:bytes",
		"/memory/classes/metadata/other:bytes",
		"/memory/classes/total:bytes",
		"/sched/goroutines:goroutines",
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	var out strings.Builder
	for _, m := range s {
		fmt.Fprintf(&out, "%s=%d ", m.Name, m.Value.Uint64())
	}
	return out.String()
}

// waitNoTransactions waits until every server transaction has ended.
func waitNoTransactions(b *testing.B, e *env) {
	deadline := time.Now().Add(30 * time.Second)
	for st := e.srv.Stats(); st.OpenTransactions+st.CachedRegisters > 0; st = e.srv.Stats() {
		if time.Now().After(deadline) {
			b.Fatalf("%d transactions still open, %d answers cached", st.OpenTransactions, st.CachedRegisters)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// vmRSS is the process's resident set size in bytes (/proc/self/status).
func vmRSS(b *testing.B) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
