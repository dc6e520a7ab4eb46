package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// startSRVZone serves, on loopback, the A records in a and the SRV records
// in srv (by owner name, fully qualified); every other name is NXDOMAIN.
// It returns the server's address.
func startSRVZone(t *testing.T, a map[string]string, srv map[string][]*dns.SRV) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		name := strings.ToLower(q.Question[0].Name)
		hdr := dns.RR_Header{Name: q.Question[0].Name, Rrtype: q.Question[0].Qtype, Class: dns.ClassINET, Ttl: 1}
		switch q.Question[0].Qtype {
		case dns.TypeA:
			if ip, ok := a[name]; ok {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.ParseIP(ip)})
			}
		case dns.TypeSRV:
			for _, s := range srv[name] {
				rr := *s
				rr.Hdr = hdr
				m.Answer = append(m.Answer, &rr)
			}
		}
		if _, ok := a[name]; !ok && len(srv[name]) == 0 {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(serve), NotifyStartedFunc: func() { close(started) }}
	go func() { _ = s.ActivateAndServe() }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("dns server did not start")
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return pc.LocalAddr().String()
}

// TestTrunkSRVFailover: a trunk named by an SRV-only domain (no port) has two
// targets; the preferred one (a SIPp carrier on 127.0.0.2) answers 503, so the
// PBX sends the INVITE to the next (a SIPp carrier on 127.0.0.3), which
// answers (RFC 3263 section 4.3). The record has the one answered leg.
func TestTrunkSRVFailover(t *testing.T) {
	portA, portB := freePort(t), freePort(t)
	zone := startSRVZone(t,
		map[string]string{"a.carrier.test.": "127.0.0.2", "b.carrier.test.": "127.0.0.3"},
		map[string][]*dns.SRV{"_sip._udp.carrier.test.": {
			{Target: "b.carrier.test.", Port: uint16(portB), Priority: 20, Weight: 1},
			{Target: "a.carrier.test.", Port: uint16(portA), Priority: 10, Weight: 1},
		}})
	t.Setenv("PBX_TEST_DNS", zone)
	p := startPBX(t, pbxConfig{Extra: `---
configVersion: pbx/v1
kind: Trunk
metadata: {name: srvcarrier}
spec:
  host: carrier.test
---
configVersion: pbx/v1
kind: OutboundRoute
metadata: {name: out, tenant: demo}
spec: {priority: 10, pattern: "^0", trunk: srvcarrier}
`})
	p.waitLog(fmt.Sprintf("destinations=\"[127.0.0.2:%d 127.0.0.3:%d]\"", portA, portB), 15*time.Second)
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice")})
	down := startSIPp(t, dir, "carrier-a", 60*time.Second, "-sf", "uas_503.xml", "-m", "1",
		"-p", strconv.Itoa(portA), "-i", "127.0.0.2", "-t", "u1")
	up := startSIPp(t, dir, "carrier-b", 60*time.Second, "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(portB), "-i", "127.0.0.3", "-mi", "127.0.0.3", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "0123", "-auth_uri", fmt.Sprintf("0123@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "500", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s\npbx log:\n%s", code, uac.errors(dir), tail(p.log.String(), 40))
	}
	if code := down.wait(); code != 0 {
		t.Fatalf("carrier a: sipp exit %d\n%s", code, down.errors(dir))
	}
	if code := up.wait(); code != 0 {
		t.Fatalf("carrier b: sipp exit %d\n%s", code, up.errors(dir))
	}
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 {
		t.Fatalf("want 1 call record, got %d", len(recs))
	}
	r := recs[0]
	if r["cause"] != "answered" || r["trunk"] != "srvcarrier" || r["direction"] != "outbound" {
		t.Fatalf("record %v", r)
	}
	if legs, _ := r["legs"].([]any); len(legs) != 1 {
		t.Fatalf("legs %v, want the one answered leg", r["legs"])
	}
}
