package sipcore_test

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"pbx/sipcore"
)

// BenchmarkUDPSourceMemory measures what the SIP core keeps per UDP source
// address: sipgo's pool entry and its reader's own map entry. Generations
// are disabled here so that every one of 5,000 sources stays; in service a
// generation holds at most udpGenerationSources (8,192) of them and a retired
// one lets go after 4s. Each source sends one response, which reaches sipgo
// without opening a transaction.
func BenchmarkUDPSourceMemory(b *testing.B) {
	const sources, batch = 5000, 500
	b.Cleanup(sipcore.SetUDPGenerations(1<<30, time.Second))
	s, addr := udpServer(b, sipcore.Options{})
	before := sipcore.LiveHeap()
	for start := 0; start < sources; start += batch {
		for i := start; i < start+batch; i++ {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: sourceIP(i)})
			if err != nil {
				b.Fatal(err)
			}
			res := fmt.Sprintf("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bKmem%d\r\n"+
				"From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:b@127.0.0.1>;tag=2\r\nCall-ID: mem%d\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
				c.LocalAddr(), i, i)
			if _, err := c.WriteToUDPAddrPort([]byte(res), addr); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().UDPPoolEntries < sources+1 {
		if time.Now().After(deadline) {
			b.Fatalf("pool holds %d of %d sources", s.Stats().UDPPoolEntries, sources)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after := sipcore.LiveHeap()
	per := float64(int64(after)-int64(before)) / sources
	b.ReportMetric(per, "B/source")
	b.Logf("%d sources: live heap %d -> %d bytes, %.0f B per source", sources, before, after, per)
	runtime.KeepAlive(s)
}
