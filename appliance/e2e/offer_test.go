package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLateOfferCall: SIPp as alice calls bob (a SIPp UAS answering PCMA) with an
// INVITE without SDP. The PBX's 200 carries its offer (checked by the scenario),
// the answer comes in the ACK, and RTP flows both ways through the PBX. A
// re-INVITE without SDP then gets the PBX's offer in its 200, answered in the ACK.
func TestLateOfferCall(t *testing.T) {
	for _, transport := range []string{"udp", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			p, recs := sippCall(t, transport, "uac_late_offer.xml")
			if r := recs[0]; r["cause"] != "answered" || r["answered_by"] != "101" {
				t.Errorf("record: %v", r)
			}
			assertMediaRelayed(t, p, 100)
		})
	}
}

// TestRequire100relRefused: an INVITE with Require: 100rel, and a PRACK, get
// 420 Bad Extension with Unsupported: 100rel (checked by the scenario); no call
// is set up and no record written.
func TestRequire100relRefused(t *testing.T) {
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice")})
	uac := startSIPp(t, dir, "uac", 30*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_require_100rel.xml", "-inf", "alice.csv",
		"-s", "101", "-m", "1", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	if code := uac.wait(); code != 0 {
		t.Fatalf("sipp exit %d\n%s\npbx log:\n%s", code, uac.errors(dir), tail(p.log.String(), 40))
	}
	p.stop()
	if recs := callRecords(t, p.dataDir); len(recs) != 0 {
		t.Fatalf("refused INVITE left %d call records", len(recs))
	}
	if strings.Contains(withoutDebug(p.log.String()), "100rel") {
		t.Fatalf("the refusal logged above debug:\n%s", tail(p.log.String(), 20))
	}
}
