package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestSessionTimerExpiry: a SIPp caller asks for a 4 s session timer as its
// refresher (RFC 4028) and never refreshes; the PBX confirms the timer in its
// 2xx (checked by the scenario) and ends the call with BYE on both legs about
// 2.7 s (the interval less a third) after the answer. The record says why.
func TestSessionTimerExpiry(t *testing.T) {
	t.Setenv("PBX_TEST_SESSION_MIN_SE", "2s")
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_session_expiry.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s\npbx log:\n%s", code, uac.errors(dir), tail(p.log.String(), 40))
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 {
		t.Fatalf("want 1 call record, got %d", len(recs))
	}
	r := recs[0]
	if r["cause"] != "answered" || r["reason"] != "session timer expired" {
		t.Fatalf("record cause %v reason %v, want answered / session timer expired", r["cause"], r["reason"])
	}
	// 4 s less min(32 s, 4/3 s) after the answer.
	if bill, _ := r["bill_ms"].(float64); bill < 2400 || bill > 3600 {
		t.Fatalf("bill_ms %v, want about 2700", r["bill_ms"])
	}
}

// TestSessionTimerRefreshedByPBX: a SIPp caller asks the PBX to refresh a 4 s
// session (refresher=uas) and allows UPDATE; the PBX sends an UPDATE with
// Session-Expires 4;refresher=uac at half the interval, twice (checked by the
// scenario), and the call lasts until the caller hangs up.
func TestSessionTimerRefreshedByPBX(t *testing.T) {
	t.Setenv("PBX_TEST_SESSION_MIN_SE", "2s")
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort, alicePort := freePort(t), freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
	start := time.Now()
	uac := startSIPp(t, dir, "uac", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_session_refresh.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-p", strconv.Itoa(alicePort), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	if code := uac.wait(); code != 0 {
		t.Fatalf("caller: sipp exit %d\n%s\npbx log:\n%s", code, uac.errors(dir), tail(p.log.String(), 40))
	}
	if took := time.Since(start); took < 4*time.Second {
		t.Fatalf("two refreshes of a 4 s session within %s, want one every 2 s", took)
	}
	if code := uas.wait(); code != 0 {
		t.Fatalf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
	p.stop()
	recs := callRecords(t, p.dataDir)
	if len(recs) != 1 || recs[0]["reason"] != "caller hung up" || recs[0]["cause"] != "answered" {
		t.Fatalf("records %v", recs)
	}
}
