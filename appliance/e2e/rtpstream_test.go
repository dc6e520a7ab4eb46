package e2e

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// streamMediaPort returns a free UDP port on 127.0.0.1 for the -mp of a
// SIPp caller whose SDP offers [auto_media_port]: SIPp 3.6 advertises
// media_port + 4*(call-1) mod 10000 for each call, so the base must leave
// 10,000 ports below 65536 (freePort's ports, 61000 and up, made every call
// past about the 550th offer a port over 65535, answered 488). It is taken
// below both the kernel's ephemeral ports (32768 and up) and the load
// benchmarks' RTP range (benchRTPMin and up): from 40000, a relay binding
// its legs' ports, or another program's socket, took it between this
// check and SIPp's bind now and then, and SIPp exited ("Unable to bind
// audio RTP socket") before its first call.
func streamMediaPort(t testing.TB) int {
	t.Helper()
	for p := 20000 + (os.Getpid()%500)*20; p < 32000; p += 2 {
		c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		c.Close()
		return p
	}
	t.Fatal("no free media port for SIPp between 20000 and 32000")
	return 0
}

// writeRTPAudio writes n 20 ms packets' worth (160 bytes each) of raw A-law
// audio for SIPp's rtp_stream action (`<exec rtp_stream="file,1,8"/>`), which
// sends it from SIPp's ordinary UDP media socket (-mp, shared by its calls),
// no raw socket. The bytes are
// writeRTPCapture's payloads, so both sources carry the same audio.
func writeRTPAudio(path string, n int) error {
	buf := make([]byte, 0, n*160)
	for i := range n {
		for j := 12; j < 172; j++ {
			buf = append(buf, byte(0xd5^(i*7+j)))
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return fmt.Errorf("write rtp audio: %w", err)
	}
	return nil
}

// rawSockets says how many raw sockets the host has (IPv4 and IPv6), and
// how many of them are UDP's. A raw UDP socket gets a copy of every UDP
// datagram delivered to its address, charged to the sender, so a benchmark
// measuring a relay's CPU per packet logs it to show the host was clean
// (SIPp's play_pcap_audio opens one per call); other protocols' (Kamailio
// keeps a send-only IPPROTO_RAW one) cost the relay nothing.
func rawSockets() string {
	all, udp := 0, 0
	for _, f := range []string{"/proc/net/raw", "/proc/net/raw6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "raw sockets unknown (" + err.Error() + ")"
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
			all++
			// The local address's "port" is the protocol: 17 is UDP.
			if fields := strings.Fields(line); len(fields) > 1 && strings.HasSuffix(fields[1], ":0011") {
				udp++
			}
		}
	}
	return fmt.Sprintf("%d raw sockets on the host, %d of them UDP", all, udp)
}
