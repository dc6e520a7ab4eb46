package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRecordsWrittenAtOpenFileLimit: a burst of calls needing more RTP
// sockets than the process may open must not take the descriptors the call
// records need. The PBX starts with an open file limit of 1,200 and the
// benchmarks' wide RTP range (28,000 sockets); 300 calls at once would hold
// 1,200 sockets (two legs, RTP and RTCP each). The media is bounded below
// the limit instead: the calls past the bound fail ("rtp ports exhausted"),
// and every call's record is written at once, never kept in memory because
// a file could not be opened (EMFILE), as it was before the bound.
func TestRecordsWrittenAtOpenFileLimit(t *testing.T) {
	requireSIPp(t)
	const calls = 300
	p := startPBX(t, pbxConfig{LogLevel: "info", RTPMin: benchRTPMin, RTPMax: benchRTPMax, NoFile: 1200})
	if !p.log.Contains("rtp ports bounded by the open file limit") {
		t.Error("no log line says the open file limit bounds the RTP ports")
	}
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerUser(t, p, dir, "bob", bobPort)
	target := fmt.Sprintf("127.0.0.1:%d", p.sipPort)
	media := freePortRange(t, 8) // SIPp binds -mp and the three ports above it
	uacPort := freePort(t)
	uas := startSIPpLoad(t, dir, "uas", time.Minute, target, "-sf", "uas_answer.xml", "-m", strconv.Itoa(calls),
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(media), "-t", "u1")
	_ = uas
	uac := startSIPpLoad(t, dir, "uac", time.Minute, target, "-sf", "bench_uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", "101@"+target,
		"-r", strconv.Itoa(calls), "-m", strconv.Itoa(calls), "-l", strconv.Itoa(calls), "-d", "3000", "-recv_timeout", "10000",
		"-p", strconv.Itoa(uacPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(media+4), "-t", "u1")
	uac.wait()
	s := uac.stats(t, dir)
	if s.Created != calls || s.OK == 0 || s.Failed == 0 {
		t.Fatalf("%d calls made, %d answered, %d failed; want %d made, some answered and some refused at the bound", s.Created, s.OK, s.Failed, calls)
	}
	deadline := time.Now().Add(15 * time.Second)
	n := 0
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // polling the data directory
		if n = len(callRecords(t, p.dataDir)); n >= calls {
			break
		}
	}
	log := p.log.String()
	if n != calls {
		t.Errorf("%d call records written, want %d", n, calls)
	}
	if !strings.Contains(log, "max_in_use") {
		t.Error("no log line says the calls past the bound were refused at it")
	}
	for _, bad := range []string{"cannot be written", "too many open files"} {
		if strings.Contains(log, bad) {
			t.Errorf("the log says %q:\n%s", bad, tail(withoutDebug(log), 20))
		}
	}
}
