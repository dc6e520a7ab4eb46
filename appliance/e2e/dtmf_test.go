package e2e

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"pbx/rtpcore"
)

// rtpCapture is a UDP socket standing for a callee's RTP port: it keeps
// every RTP packet it receives.
type rtpCapture struct {
	conn *net.UDPConn
	mu   sync.Mutex
	pkts []capturedRTP
}

type capturedRTP struct {
	h       rtpcore.Header
	payload []byte
}

func newRTPCapture(t *testing.T) *rtpCapture {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: freePort(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := &rtpCapture{conn: conn}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			h, err := rtpcore.ParseHeader(buf[:n])
			if err != nil {
				continue
			}
			c.mu.Lock()
			c.pkts = append(c.pkts, capturedRTP{h: h, payload: append([]byte(nil), h.Payload(buf[:n])...)})
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *rtpCapture) port() int { return c.conn.LocalAddr().(*net.UDPAddr).Port }

// events returns the captured packets of payload type pt.
func (c *rtpCapture) events(pt uint8) []capturedRTP {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []capturedRTP
	for _, p := range c.pkts {
		if p.h.PayloadType == pt {
			out = append(out, p)
		}
	}
	return out
}

// TestInfoDTMFArrivesAsRFC4733: a SIPp caller sends DTMF as SIP INFO (5 as
// application/dtmf-relay with Duration=160, # as application/dtmf); the SIPp
// callee negotiated telephone-event 101, and its RTP port (a capture socket)
// receives each digit as RFC 4733 events: one timestamp per digit, the marker
// on the first packet, growing durations, three end packets of 1280 samples
// (160 ms). The record's digits hold both.
func TestInfoDTMFArrivesAsRFC4733(t *testing.T) {
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	capture := newRTPCapture(t)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer_capture.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-key", "rtpport", strconv.Itoa(capture.port()), "-t", "u1")
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_info_dtmf.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "1500", "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s\npbx log:\n%s", code, uac.errors(dir), tail(p.log.String(), 40))
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
	evs := capture.events(101)
	if len(evs) != 20 {
		t.Fatalf("callee received %d telephone-event packets, want 20 (10 per digit)", len(evs))
	}
	for d, want := range []uint8{5, 11} {
		pkts := evs[d*10 : d*10+10]
		for i, pk := range pkts {
			ev, err := rtpcore.ParseDTMF(pk.payload)
			end := i >= 7
			dur := uint16(160 * (i + 1))
			if end {
				dur = 1280
			}
			if err != nil || ev.Event != want || ev.End != end || ev.Duration != dur || pk.h.Marker != (i == 0) ||
				pk.h.Timestamp != pkts[0].h.Timestamp || pk.h.Sequence != pkts[0].h.Sequence+uint16(i) {
				t.Fatalf("digit %d packet %d: %+v marker %v ts %d seq %d (%v); want event %d end %v duration %d, first ts %d seq %d",
					d, i, ev, pk.h.Marker, pk.h.Timestamp, pk.h.Sequence, err, want, end, dur, pkts[0].h.Timestamp, pkts[0].h.Sequence+uint16(i))
			}
		}
	}
	if evs[10].h.Timestamp == evs[0].h.Timestamp {
		t.Fatal("two digits share one event timestamp")
	}
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 {
		t.Fatalf("want 1 call record, got %d", len(recs))
	}
	ds, _ := recs[0]["digits"].([]any)
	if len(ds) != 1 {
		t.Fatalf("record digits %v, want one entry", recs[0]["digits"])
	}
	if d, _ := ds[0].(map[string]any); d["digits"] != "5#" {
		t.Fatalf("record digits %v, want 5#", ds[0])
	}
}
